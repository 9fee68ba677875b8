#ifndef CTASKPOOL_H
#define CTASKPOOL_H

#include <stdint.h>

/* What TaskPool needs of Linux that Swift's Glibc module does not import. */

/* CLOCK_BOOTTIME in nanoseconds: the clock Swift's ContinuousClock reads, which goes on while
 * the machine is suspended. */
uint64_t ctp_boottime_ns(void);

/* A timer file on CLOCK_BOOTTIME (close-on-exec), or -1: a thread that reads it sleeps until the
 * time it is armed for, a suspend included, and is woken at resume when that time has passed. */
int ctp_timer_create(void);

/* Arms the timer for `deadline_ns` of CLOCK_BOOTTIME (absolute; at once when past), or disarms
 * it with 0. Any thread may re-arm it while another waits in ctp_timer_wait. */
int ctp_timer_arm(int fd, uint64_t deadline_ns);

/* Blocks until the timer expires (or a signal interrupts); 0 when it did. */
int ctp_timer_wait(int fd);

/* The processors this process may run on (its affinity mask), at least 1. */
int ctp_available_processors(void);

/* Marks the calling thread as one of the pool's and, unless `name` is NULL, names it `name` (at
 * most 15 bytes: what ps, top and /proc/PID/task/TID/comm show). */
void ctp_mark_thread(const char *name);

/* Whether the calling thread was marked (ctp_mark_thread). */
int ctp_thread_is_marked(void);

#endif
