/* A program that embeds Python the way Nsight Compute does for its rules: libpython loaded with
 * RTLD_LOCAL, so its C API is not visible to the extension modules the interpreter loads (each
 * fails with "undefined symbol: Py..."). Started with KNAME=1 in the environment, that Python
 * reads kname.pth like any other.
 *
 *     embedding_host LIBPYTHON CODE      exit 0 when CODE ran without an exception
 */
#include <dlfcn.h>
#include <stdio.h>

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBPYTHON CODE\n", argv[0]);
        return 2;
    }
    void *python = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (python == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    void (*initialize)(int) = (void (*)(int))dlsym(python, "Py_InitializeEx");
    int (*run)(const char *) = (int (*)(const char *))dlsym(python, "PyRun_SimpleString");
    int (*finalize)(void) = (int (*)(void))dlsym(python, "Py_FinalizeEx");
    if (initialize == NULL || run == NULL || finalize == NULL) {
        fprintf(stderr, "not a libpython: %s\n", argv[1]);
        return 2;
    }
    initialize(0);
    int failed = run(argv[2]);
    finalize();
    return failed ? 1 : 0;
}
