"""Model cards: the README.md of a saved folder, rendered from `templates/model_card.md`."""
