/*
 * kname._native's naming of the common miss (miss.c), which find_missed_site (callsite.c) asks
 * first: a launch straight from a line of user code, under the rules' KNAME_DEPTH 1, named in C
 * by Python's rules (kname.callsite.NativeMiss holds what they decided) and built by one Python
 * call, NativeMiss.build. The types are types.h's.
 */
#ifndef KNAME_NATIVE_MISS_H
#define KNAME_NATIVE_MISS_H

#include "_native_c/types.h" /* first: it includes Python.h */

/* The site of a launch of `w` straight from `caller`, a frame of user code (`kind`: KIND_USER,
 * or -1 where its code's kind is not decided yet), named here; NULL without an error where
 * resolve() names it (another case, or a fault of C's own, said once through
 * NativeMiss.failed(exc): Python names every miss from then on), NULL with an error raised by
 * the Python code it called (it propagates as from resolve()). `kernel_id`: id(kernel). */
INTERNAL PyObject *named_in_c(LaunchWrapper *w, Frame *caller, PyObject *kernel,
                              PyObject *kernel_id, int kind);

/* For sites_ready (callsite.c): the names it reads interned. 0, or -1 with an error. */
INTERNAL int miss_ready(void);

#endif /* KNAME_NATIVE_MISS_H */
