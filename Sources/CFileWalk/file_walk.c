// SPDX-License-Identifier: MIT
#define _GNU_SOURCE
#include "file_walk.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Set once the kernel, or a seccomp filter, refused openat2: later calls go straight to openat. */
static int openat2_missing;

int cfw_open_directory_beneath(int directory, const char *name) {
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
#ifdef SYS_openat2
    if (!__atomic_load_n(&openat2_missing, __ATOMIC_RELAXED)) {
        struct open_how how = {
            .flags = (unsigned long long)flags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        };
        long fd = syscall(SYS_openat2, directory, name, &how, sizeof how);
        if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return (int)fd;
        __atomic_store_n(&openat2_missing, 1, __ATOMIC_RELAXED);
    }
#endif
    return openat(directory, name, flags);
}
