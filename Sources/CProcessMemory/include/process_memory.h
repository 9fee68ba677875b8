#ifndef CPROCESSMEMORY_H
#define CPROCESSMEMORY_H

#include <stddef.h>

/* Gives back what a burst of work left in this process's page tables and heap, without changing
 * anything it holds: the heap's free memory is returned to the kernel (malloc_trim), and the
 * pages of code mappings (private, executable, never writable) are unmapped from the process
 * (madvise MADV_DONTNEED) when no page of the mapping was ever written (no anonymous, no private
 * dirty page: it is still the file's). Those pages stay in the page cache and come back at the
 * next touch, as a minor fault.
 *
 * Only code: a mapping's range is read from /proc/self/smaps and advised after, so it must not
 * change meanwhile. Code mappings change only when a library is loaded or unloaded: call this
 * where no thread can (libcurl's loader lock, ccurl_after_unload, is such a place). A range that
 * the dynamic loader has reserved for a library it is loading is never executable. */
void cpm_release_untouched_code(void);

/* The bytes of mappings the last call released. */
size_t cpm_last_released(void);

#endif
