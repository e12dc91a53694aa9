"""``trt-routes init``: a first tuning.yaml written from the models themselves (``inspect`` reads an ONNX
file's inputs, ``write`` turns them into a manifest for this machine), and the quickstart project.

Reads model files and writes one new manifest (plus the quickstart's generated models); it runs nothing and
opens no cache. Above ``project``, below everything that tunes."""
