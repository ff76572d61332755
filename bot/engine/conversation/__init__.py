"""Conversations: the chat graph, what the model reads, and running one turn of a channel under its lock."""
