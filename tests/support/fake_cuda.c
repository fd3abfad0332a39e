/*
 * A stand-in libcuda.so.1 for kname's driver hook where no GPU is (tests/native/test_driver_hook.py):
 * the launch entry points the hook takes, each marking its call with an NVTX mark ("launch
 * <entry>", through its own NVTX table, as any library's), so that a capture shows whether the
 * launch ran inside a range; and cuGetProcAddress (v1 and v2), as the CUDA runtime asks it, with
 * per-thread-stream variants for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (flag 2).
 * Built with -Wl,-soname,libcuda.so.1; fake_cudart.c uses it as libcudart uses the real one.
 */
#include <nvtx3/nvToolsExt.h>
#include <string.h>

typedef int CUresult;

#define LAUNCH_MARK(entry) nvtxMarkA("launch " entry)

CUresult
cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
               unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
    (void)stream, (void)params, (void)extra;
    LAUNCH_MARK("cuLaunchKernel");
    return 0;
}

CUresult
cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
    (void)stream, (void)params, (void)extra;
    LAUNCH_MARK("cuLaunchKernel_ptsz");
    return 0;
}

CUresult
cuLaunchKernelEx(const void *config, void *f, void **params, void **extra)
{
    (void)config, (void)f, (void)params, (void)extra;
    LAUNCH_MARK("cuLaunchKernelEx");
    return 0;
}

CUresult
cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void *stream, void **params)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
    (void)stream, (void)params;
    LAUNCH_MARK("cuLaunchCooperativeKernel");
    return 0;
}

CUresult
cuGraphLaunch(void *exec, void *stream)
{
    (void)exec, (void)stream;
    LAUNCH_MARK("cuGraphLaunch");
    return 0;
}

CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, void *);

static const struct {
    const char *name;
    void *plain, *per_thread;
} entries[] = {
    {"cuLaunchKernel", (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel,
     (void *)cuLaunchCooperativeKernel},
    {"cuGraphLaunch", (void *)cuGraphLaunch, (void *)cuGraphLaunch},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2, (void *)cuGetProcAddress_v2},
};

CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                    void *status)
{
    (void)version;
    if (status != NULL)
        *(int *)status = 0;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (strcmp(symbol, entries[i].name) == 0) {
            *pfn = (flags & 2) ? entries[i].per_thread : entries[i].plain;
            return 0;
        }
    *pfn = NULL;
    return 500; /* CUDA_ERROR_NOT_FOUND */
}

CUresult
cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
