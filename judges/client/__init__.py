"""The judge client and what it rests on: settings, wire codec, reply cache, redaction, rate budget and limits, transport, batches, the process-wide clients."""
