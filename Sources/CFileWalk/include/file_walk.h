// SPDX-License-Identifier: MIT
#ifndef CFILEWALK_H
#define CFILEWALK_H

/* Opens `name`, one entry of the open directory `directory`, as a directory, never through a
 * symbolic link, never outside `directory` and never onto another mount: openat2(2) with
 * RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV where the
 * kernel has it (Linux 5.6), else
 * openat(2) with O_NOFOLLOW (the same for one name without a slash, . or ..). Both with
 * O_DIRECTORY and O_CLOEXEC. A descriptor, or -1 with errno (ELOOP: a link; ENOTDIR: not a
 * directory; EXDEV: a name that would leave `directory` or its mount). */
int cfw_open_directory_beneath(int directory, const char *name);

#endif
