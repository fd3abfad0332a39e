/*
 * A stand-in CUDA runtime for kname's driver hook (tests/native/test_driver_hook.py): it reaches the
 * stand-in driver (fake_cuda.c) each way a real library does. runtime_launch, as libcudart and
 * the runtimes linked into cuBLAS or XLA do: dlopen("libcuda.so.1"), dlsym cuGetProcAddress_v2
 * on that handle, then cuLaunchKernel through it (once; the pointer kept, as the runtime keeps
 * it). stub_launch, as XLA's stubs and Triton's launcher: dlsym of the launch function itself.
 * direct_launch, as CuPy: cuLaunchKernel imported from libcuda (linked with -lcuda).
 * thread_launch: runtime_launch on a thread Python never ran on (autograd's, say).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

typedef int CUresult;
typedef CUresult (*ProcFn)(const char *, void **, int, unsigned long long, void *);
typedef CUresult (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void *, void **, void **);
typedef CUresult (*GraphFn)(void *, void *);

CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);

static LaunchFn kept_launch[2];

static void *
driver(void)
{
    return dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
}

int
runtime_launch(int per_thread)
{
    if (kept_launch[per_thread] == NULL) {
        void *cuda = driver();
        ProcFn proc = cuda == NULL ? NULL : (ProcFn)dlsym(cuda, "cuGetProcAddress_v2");
        int status;
        if (proc == NULL
            || proc("cuLaunchKernel", (void **)&kept_launch[per_thread], 12000,
                    per_thread ? 2 : 1, &status) != 0)
            return -1;
    }
    return kept_launch[per_thread](NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

int
stub_launch(void)
{
    void *cuda = driver();
    GraphFn graph = cuda == NULL ? NULL : (GraphFn)dlsym(cuda, "cuGraphLaunch");
    return graph == NULL ? -1 : graph(NULL, NULL);
}

int
direct_launch(void)
{
    return cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

static void *
launch_on_thread(void *result)
{
    *(int *)result = runtime_launch(0);
    return NULL;
}

int
thread_launch(void)
{
    pthread_t thread;
    int result = -1;
    if (pthread_create(&thread, NULL, launch_on_thread, &result) != 0)
        return -1;
    pthread_join(thread, NULL);
    return result;
}

/* The floor the hook is measured against (benchmarks/driver_hook_cost.py): runtime_launch inside
 * a prebuilt static NVTX range (kname's domain, a registered message), pushed and popped in C. */
#ifdef FAKE_CUDART_NVTX
#include <nvtx3/nvToolsExt.h>

int
static_range_launch(int per_thread)
{
    static nvtxDomainHandle_t domain;
    static nvtxEventAttributes_t attributes;
    if (domain == NULL) {
        domain = nvtxDomainCreateA("kname");
        attributes.version = NVTX_VERSION;
        attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        attributes.message.registered = nvtxDomainRegisterStringA(domain, "static range");
    }
    nvtxDomainRangePushEx(domain, &attributes);
    int result = runtime_launch(per_thread);
    nvtxDomainRangePop(domain);
    return result;
}
#endif
