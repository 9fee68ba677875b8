#define _GNU_SOURCE
#include "task_pool.h"

#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

uint64_t ctp_boottime_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

int ctp_timer_create(void) { return timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC); }

int ctp_timer_arm(int fd, uint64_t deadline_ns) {
    struct itimerspec spec = {0};
    /* 0 disarms; a deadline of 0 itself is long past, so 1 ns stands for "at once". */
    spec.it_value.tv_sec = (time_t)(deadline_ns / 1000000000u);
    spec.it_value.tv_nsec = (long)(deadline_ns % 1000000000u);
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL);
}

int ctp_timer_wait(int fd) {
    uint64_t expirations;
    return read(fd, &expirations, sizeof expirations) == sizeof expirations ? 0 : -1;
}

int ctp_available_processors(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

static _Thread_local int marked;

void ctp_mark_thread(const char *name) {
    marked = 1;
    if (name != NULL) prctl(PR_SET_NAME, name, 0, 0, 0);
}

int ctp_thread_is_marked(void) { return marked; }
