"""discord.py extensions: thin adapters between Discord and the engine (parse, defer, call, format)."""
