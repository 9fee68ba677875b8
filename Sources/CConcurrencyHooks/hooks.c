#define _GNU_SOURCE
#include <sched.h>
#include <unistd.h>
#include "concurrency_hooks.h"

extern void *swift_task_enqueueGlobal_hook;
extern void *swift_task_enqueueGlobalWithDelay_hook;
extern void *swift_task_enqueueGlobalWithDeadline_hook;
extern void *swift_task_enqueueMainExecutor_hook;

void cch_install(void *global, void *delay, void *deadline, void *main_executor) {
    swift_task_enqueueGlobal_hook = global;
    swift_task_enqueueGlobalWithDelay_hook = delay;
    swift_task_enqueueGlobalWithDeadline_hook = deadline;
    swift_task_enqueueMainExecutor_hook = main_executor;
}

int cch_available_processors(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}
