"""The Discord-free engine: conversation graph, memories, prompts and the chat-model factory."""
