/*
 * The launch-bound verdict's numbers in the join in C: kname.profiling.launch_times's twin (the
 * specification). Each line's timed kernel launch calls, their CPU time, and the GPU idle they
 * left, kept in the join's SiteTotal; the calls waiting for their first GPU record, the links
 * from a call made inside another to it, and each stream's last end, in the Join. Everything
 * here runs under the recorder's activity_lock, as the join does.
 */
#ifndef KNAME_NATIVE_CUPTI_LAUNCH_TIMES_H
#define KNAME_NATIVE_CUPTI_LAUNCH_TIMES_H

#include "profiling/_cupti_c/join.h"

/* LaunchTimes.launch: a launch call handed to the join (finished: its times known). */
INTERNAL void times_launch(Join *j, const Launch *launch);

/* LaunchTimes.count: a GPU record joined at site `s` (-1: not counted, for want of memory);
 * `graph`: graph work, which times no launch call. */
INTERNAL void times_count(Join *j, int64_t s, const GpuRecord *g, int graph);

#endif /* KNAME_NATIVE_CUPTI_LAUNCH_TIMES_H */
