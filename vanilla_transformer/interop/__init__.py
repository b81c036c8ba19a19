"""Other formats and engines: converting Marian and FSMT checkpoints (`convert`), exporting to CTranslate2
(`export_ctranslate2`, translated by `ctranslate2_runtime`) and to a MarianMTModel (`export_marian`)."""
