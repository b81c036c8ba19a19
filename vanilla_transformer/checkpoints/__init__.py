"""Saved folders: what kind a folder is (`kinds`), whether it is complete and loadable (`validate`), and loading it
for translation, plotting or exploring (`load`)."""
