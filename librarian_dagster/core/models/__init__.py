"""The models Librarian calls: the embedders (offline MiniLM, Gemini) and the chosen digester."""
