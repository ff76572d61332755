"""A Discord chatbot that remembers people.

``bot.engine`` is the Discord-free core (graph, memories, prompts, model); ``bot.client`` and ``cogs/``
adapt it to Discord; ``bot.storage`` opens the databases in one place.
"""
