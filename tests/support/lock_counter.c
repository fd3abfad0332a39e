/*
 * A preload library (LD_PRELOAD) that counts the pthread mutex locks and the GIL takes made from
 * one shared object: every pthread_mutex_lock and PyGILState_Ensure call is passed on to the
 * real one, and counted when its caller's code lies in an object whose path holds
 * LOCK_COUNTER_OF (kname._native_cupti, for the tests of its launch callback). locks_counted()
 * and gil_takes_counted() read the counts and start them afresh. (Where Python is linked into
 * its executable, the executable's PyGILState_Ensure may be found first: no take is counted.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long counted, gil_takes;

static int (*real_lock)(pthread_mutex_t *);
static int (*real_ensure)(void);

/* Whether the code at `address` is the counted object's (the answer kept per call site). */
static int
counted_caller(void *address)
{
    static _Thread_local void *last_address;
    static _Thread_local int last_answer;
    if (address == last_address)
        return last_answer;
    Dl_info info;
    const char *of = getenv("LOCK_COUNTER_OF");
    int answer = of != NULL && dladdr(address, &info) && info.dli_fname != NULL
                 && strstr(info.dli_fname, of) != NULL;
    last_address = address;
    last_answer = answer;
    return answer;
}

int
pthread_mutex_lock(pthread_mutex_t *mutex)
{
    if (real_lock == NULL)
        real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (counted_caller(__builtin_return_address(0)))
        atomic_fetch_add(&counted, 1);
    return real_lock(mutex);
}

long
locks_counted(void)
{
    return atomic_exchange(&counted, 0);
}

int
PyGILState_Ensure(void)
{
    if (real_ensure == NULL)
        real_ensure = (int (*)(void))dlsym(RTLD_NEXT, "PyGILState_Ensure");
    if (counted_caller(__builtin_return_address(0)))
        atomic_fetch_add(&gil_takes, 1);
    return real_ensure();
}

long
gil_takes_counted(void)
{
    return atomic_exchange(&gil_takes, 0);
}
