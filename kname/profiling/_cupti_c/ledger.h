/*
 * kname._native_cupti's Ledger (ledger.c): kname.profiling.memory.Ledger's accounting in C, for
 * the events torch's allocator tracker hands over by the thousand (torch_tracker.c adds them
 * straight in, no tuple per event).
 */
#ifndef KNAME_LEDGER_H
#define KNAME_LEDGER_H

#include "_common_c/common.h" /* first: it includes Python.h */

#include <stdint.h>

typedef struct NativeLedger NativeLedger;

INTERNAL extern PyTypeObject NativeLedgerType;

/* One event, as memory.Ledger.allocate (`name` a str) or .free (`name` NULL) takes it. 0, or -1
 * with an error set (no memory: the ledger is as before the event). Under the GIL. */
INTERNAL int ledger_add(NativeLedger *ledger, uint64_t address, PyObject *name, int64_t ns,
                        uint64_t size);

/* The type added to the module as `Ledger` (module.c calls it). */
INTERNAL int ledger_ready(PyObject *module);

#endif
