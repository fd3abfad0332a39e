/*
 * What kname's two C extensions share (each is built from several files; setup.py lists them, and
 * docs/architecture.md says what each holds): callsite's kinds of code, errors taken and put back
 * on every supported CPython, and the generation of the dicts they look up (kname.callsite's
 * `sites` and `kinds`), which tells a table of recent look-ups when an entry may no longer
 * answer; and the caller's frame, read without making a frame object. What this header declares
 * but does not define is in common.c, built into each extension: one copy per extension.
 */
#ifndef KNAME_NATIVE_COMMON_H
#define KNAME_NATIVE_COMMON_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

#ifdef Py_T_OBJECT_EX
#define MEMBER_OBJECT_EX Py_T_OBJECT_EX
#define MEMBER_SSIZE Py_T_PYSSIZET
#define MEMBER_READONLY Py_READONLY
#else
#define MEMBER_OBJECT_EX T_OBJECT_EX
#define MEMBER_SSIZE T_PYSSIZET
#define MEMBER_READONLY READONLY
#endif

/* kname.callsite's kinds of code: a call site; library code and plumbing (the standard library,
 * kname, wrapt), both passed over on the way to a call site. */
#define KIND_USER 0
#define KIND_LIBRARY 1
#define KIND_PLUMBING 3
#define PASSED_OVER(kind) ((kind) == KIND_LIBRARY || (kind) == KIND_PLUMBING)
#define MAX_WALK 64 /* frames a keyed walk passes before leaving the search to Python */

/* Code off a cached launch's way (a miss, a fault, a first sight of a type): kept out of line and
 * apart, so that what a cached launch runs stays small and together. Inside a library's launch,
 * which runs far more code than kname, kname's code is fetched anew at every launch: the fewer
 * cache lines it spans, the less it costs there. */
#if defined(__GNUC__)
#define COLD __attribute__((cold, noinline))
#define NOINLINE __attribute__((noinline))
#else
#define COLD
#define NOINLINE
#endif

/* What one file of an extension defines for its others: hidden, so that the shared object does
 * not export it, and a use in another file reaches it as directly as a static one (no GOT). */
#if defined(__GNUC__)
#define INTERNAL __attribute__((visibility("hidden")))
#else
#define INTERNAL
#endif

/* The kind kname.callsite's `kinds` (id(code) -> kind) holds for `code`: KIND_USER, KIND_LIBRARY,
 * KIND_PLUMBING, or -1 when it has not decided (or decided something else, as for kname's own
 * wrapper); -2 on error. */
INTERNAL int decided_kind(PyObject *kinds, PyCodeObject *code);

/* `methods` (NULL-terminated) added to `type`, made ready: how a file adds its own methods to a
 * type another file defines (each C file registers what it defines). 0, or -1 with an error. */
INTERNAL int add_methods(PyTypeObject *type, PyMethodDef *methods);

/* ------------------------------------------------------------------ errors across versions */

/* The error set now, taken (cleared), as one exception object; NULL when none is set. */
INTERNAL PyObject *take_error(void);

/* Sets `exc` (a reference it steals) as the error; nothing when NULL. */
static inline void
restore_error(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    if (exc == NULL)
        return;
    PyObject *traceback = PyException_GetTraceback(exc);
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, traceback);
#endif
}

/* ------------------------------------------------------------------ watched changes */

/* kname remembers look-ups of a few dicts (the call-site caches) and types (the classes whose
 * __slots__ it reads in place, the classes it calls through a C slot) for as long as they are
 * unchanged. A stamp tells: remembered with one stamp, an answer holds while the stamp reads the
 * same. On 3.12+, watchers count changes to the watched dicts and types: the stamps are those
 * counts, which live in one cache line with the other globals a cached launch reads (`hot`), so
 * the check reads no dict or type. On 3.11, the stamps are the objects' own version tags (a
 * type's while valid: valid_version_tag). forget_all() makes every dict stamp read anew. */
typedef struct {
    _Alignas(64) uint64_t dict_changes; /* changes to a watched dict (3.12+), and forget_all()s */
    uint64_t type_changes;              /* 3.12+: changes to a watched type (or to a base) */
    /* kname._native's C __call__ slot (direct_call): the class it last called through, with its
     * stamp, its __call__ (borrowed: the unchanged class holds it) and its base class's slot. */
    PyTypeObject *call_type; /* strong: its address cannot be reused while remembered */
    uint64_t call_stamp;
    PyObject *call;
    ternaryfunc call_base_slot;
    void *call_short; /* `call` where its cached launches may take the slot's short path */
} Hot;

INTERNAL extern Hot hot; /* one per extension: common.c */

/* Every look-up of a dict remembered so far stale, as if each dict had changed (generation_of
 * reads hot.dict_changes on every version). */
static inline void
forget_all(void)
{
    hot.dict_changes++;
}

/* A stamp no type has: a type that cannot be followed is never remembered. */
#define NO_STAMP UINT64_MAX

/* `type`'s version tag while it is valid, else 0. CPython never reuses a tag, and a change to the
 * type or to a base invalidates it: 3.12+ sets it to 0; 3.11 clears Py_TPFLAGS_VALID_VERSION_TAG
 * (and, in the releases read here, sets it to 0 too: the flag is what 3.11 itself trusts). */
static inline unsigned int
valid_version_tag(PyTypeObject *type)
{
#if PY_VERSION_HEX >= 0x030C0000
    return type->tp_version_tag;
#else
    return (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
#endif
}

/* The stamp of look-ups of `dict` (made since follow_changes said yes). */
static inline uint64_t
generation_of(PyObject *dict)
{
#if PY_VERSION_HEX >= 0x030C0000
    (void)dict;
    return hot.dict_changes;
#else
    /* 3.11: a new value from one global sequence at every change of the dict (PEP 509), plus
     * the forget_all()s: the sum moves when either does, as both only grow. */
    return ((PyDictObject *)dict)->ma_version_tag + hot.dict_changes;
#endif
}

/* The stamp of look-ups on `type` (made since follow_type gave a stamp other than NO_STAMP). */
static inline uint64_t
type_stamp(PyTypeObject *type)
{
#if PY_VERSION_HEX >= 0x030C0000
    (void)type;
    return hot.type_changes;
#else
    return valid_version_tag(type); /* 3.11: the tag itself, 0 once the type changes */
#endif
}

/* Whether look-ups of `dict` may be remembered: on 3.12+, it must be watched. */
INTERNAL int follow_changes(PyObject *dict);

/* `type`'s stamp, to remember a look-up on it by, or NO_STAMP when its changes cannot be
 * followed. Taken after the look-up, which gives the type a version tag where it has none:
 * CPython tells a type's watchers of a change only while the type has one. */
INTERNAL uint64_t follow_type(PyTypeObject *type);

/* At the module's import, once each: no watcher id left means every look-up is made anew. */
INTERNAL void watch_dicts(void);
INTERNAL void watch_types(void);

/* ------------------------------------------------------------------ frames */

/* PyEval_GetFrame() makes the running function's frame object the first time it is asked: a
 * launch from a function called once per launch (a training step's) would pay an allocation,
 * and CPython's copy of the frame into it as the function returns, at every launch. On CPython
 * 3.11 to 3.13 the hot paths read the interpreter's own frames instead, as PyEval_GetFrame,
 * PyFrame_GetBack, PyFrame_GetCode and PyFrame_GetLasti see them (incomplete frames skipped),
 * and a frame object is made only where Python is handed one (a new call site, a fault).
 * Elsewhere a Frame is the frame object itself. Frames are borrowed: a frame on the running
 * thread's stack outlives the C call that reads it. */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE

typedef _PyInterpreterFrame Frame;

static inline Frame *
complete_frame(Frame *frame)
{
    while (frame != NULL && _PyFrame_IsIncomplete(frame))
        frame = frame->previous;
    return frame;
}

/* The running Python frame, as PyEval_GetFrame() finds it (NULL: none). */
static inline Frame *
frame_current(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return complete_frame(PyThreadState_GET()->current_frame);
#else
    return complete_frame(PyThreadState_GET()->cframe->current_frame);
#endif
}

static inline Frame *
frame_back(Frame *frame)
{
    return complete_frame(frame->previous);
}

static inline PyCodeObject *
frame_code(Frame *frame)
{
#if PY_VERSION_HEX >= 0x030D0000
    return _PyFrame_GetCode(frame);
#else
    return frame->f_code;
#endif
}

/* As PyFrame_GetLasti: the offset in bytes of the last instruction started, -1 before any. */
static inline int
frame_lasti(Frame *frame)
{
    int lasti = _PyInterpreterFrame_LASTI(frame);
    return lasti < 0 ? -1 : lasti * (int)sizeof(_Py_CODEUNIT);
}

/* Where `frame` is in its code, as one address: its current instruction, which lies inside its
 * code object (CPython 3.11+ keeps the bytecode there), so no other live code object has it. */
static inline const void *
frame_position(Frame *frame)
{
#if PY_VERSION_HEX >= 0x030D0000
    return frame->instr_ptr;
#else
    return frame->prev_instr;
#endif
}

/* The Frame of a frame object whose function is running. */
static inline Frame *
frame_of(PyFrameObject *frame)
{
    return frame->f_frame;
}

/* Frames read without the GIL, on the thread that owns them (stopped in a C call: no other
 * thread changes them): frame_of_state gives its running frame. */
#define FRAMES_WITHOUT_GIL 1

/* The running frame of `state`, a thread state of this thread whose GIL may be released. */
static inline Frame *
frame_of_state(PyThreadState *state)
{
#if PY_VERSION_HEX >= 0x030D0000
    return complete_frame(state->current_frame);
#else
    return complete_frame(state->cframe->current_frame);
#endif
}
#else
typedef PyFrameObject Frame;

static inline Frame *
frame_current(void)
{
    return PyEval_GetFrame();
}

static inline Frame *
frame_back(Frame *frame)
{
    Frame *back = PyFrame_GetBack(frame);
    Py_XDECREF(back); /* its running frame keeps the frame object PyFrame_GetBack made */
    return back;
}

static inline PyCodeObject *
frame_code(Frame *frame)
{
    PyCodeObject *code = PyFrame_GetCode(frame);
    Py_DECREF(code); /* the frame keeps it */
    return code;
}

static inline int
frame_lasti(Frame *frame)
{
    return PyFrame_GetLasti(frame);
}

static inline const void *
frame_position(Frame *frame)
{
    /* Inside the code object, as above: the bytecode follows a header longer than 2 bytes. */
    return (const char *)frame_code(frame) + frame_lasti(frame) + 2;
}

static inline Frame *
frame_of(PyFrameObject *frame)
{
    return frame;
}
#endif

#endif
