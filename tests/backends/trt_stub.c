/* A stand-in for the C entry points that TensorRT's Python bindings (tensorrt_bindings/tensorrt.so of the
 * tensorrt-cuXX-bindings wheels) resolve when they load: every factory returns NULL, so the bindings import
 * and can be inspected, and any attempt to create a Builder, Runtime, Refitter or parser fails as it does
 * on a machine where TensorRT cannot start (pybind11 raises TypeError). Built at test time under the three
 * library names the extension lists as NEEDED; checked against `nm -D --undefined-only` of the extension
 * by tests/backends/test_tensorrt_conformance.py. Not TensorRT: it holds nothing of NVIDIA's. */
#include <stddef.h>

void *createInferBuilder_INTERNAL(void *logger, int version) { (void)logger; (void)version; return NULL; }
void *createInferRuntime_INTERNAL(void *logger, int version) { (void)logger; (void)version; return NULL; }
void *createInferRefitter_INTERNAL(void *engine, void *logger, int version)
{
    (void)engine; (void)logger; (void)version; return NULL;
}
void *getBuilderPluginRegistry(int capability) { (void)capability; return NULL; }
void *getPluginRegistry(void) { return NULL; }
void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version)
{
    (void)network; (void)logger; (void)version; return NULL;
}
void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version)
{
    (void)refitter; (void)logger; (void)version; return NULL;
}
int getNvOnnxParserVersion(void) { return 0; }
int initLibNvInferPlugins(void *logger, const char *library_namespace)
{
    (void)logger; (void)library_namespace; return 0;
}
