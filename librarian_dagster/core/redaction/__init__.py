"""The leak-check: secrets found and replaced before anything is stored, logged or sent."""
