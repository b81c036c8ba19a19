"""Saved folders: what kind a folder is (`kinds`), whether it is complete and loadable (`validate`), and loading it
for translation, plotting or exploring (`load`).

The engines a folder can be run by are named here, in a module without torch, for the command line's options."""

ENGINES = ("auto", "pytorch", "ctranslate2")
