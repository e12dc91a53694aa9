"""Files on disk: the content-addressed blob store (``artifacts``), model files and their digests
(``model_files``), and the memo of facts derived from immutable inputs (``memo``)."""
