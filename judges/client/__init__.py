"""The judge client and what it rests on: settings, reply cache, rate budget and limits, transport, batches."""
