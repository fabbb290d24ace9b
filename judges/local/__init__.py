"""The embedded local judge: llama.cpp's OpenAI-compatible server, started and watched from the caller."""
