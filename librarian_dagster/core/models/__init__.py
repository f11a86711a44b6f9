"""The models Librarian calls: the embedders (MiniLM, Gemini), the clients digesters call."""
