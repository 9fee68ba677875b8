#ifndef CPROCESSMEMORY_H
#define CPROCESSMEMORY_H

#include <stddef.h>

/* Gives back what a burst of work left in this process's page tables and heap, without changing
 * anything it runs: the heap's free memory is returned to the kernel (malloc_trim), and the pages
 * of every loaded object's code segments (loaded, executable, never writable; objects with text
 * relocations skipped) are unmapped from the process (madvise MADV_DONTNEED). They stay in the
 * page cache and come back at the next touch, as a minor fault. The segments come from
 * dl_iterate_phdr, which holds the dynamic loader's lock: no library is loaded or unloaded
 * meanwhile. A debugger's breakpoints or a uprobe in that code would be dropped with its page. */
void cpm_release_untouched_code(void);

/* The bytes of code the last call released. */
size_t cpm_last_released(void);

#endif
