"""Seeing inside a model: the pictures of the classic explanations (`plots`) and the interactive explorer
(`explorer`, with its page assets in `explore_assets/`)."""
