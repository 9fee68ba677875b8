#define _GNU_SOURCE
#include "process_memory.h"

#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t last_released;

size_t cpm_last_released(void) { return last_released; }

/* An object with text relocations writes into its code segments at load: those pages are its
 * own copies, and dropping them would bring the file's bytes back. */
static int has_text_relocations(const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; dynamic->d_tag != DT_NULL; dynamic++) {
            if (dynamic->d_tag == DT_TEXTREL) return 1;
            if (dynamic->d_tag == DT_FLAGS && (dynamic->d_un.d_val & DF_TEXTREL)) return 1;
        }
    }
    return 0;
}

static int release_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    size_t *released = data;
    if (has_text_relocations(info)) return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
        /* Code: loaded, executable, never writable. */
        if (segment->p_type != PT_LOAD || !(segment->p_flags & PF_X) || (segment->p_flags & PF_W)) continue;
        /* Whole pages inside the segment only: a page it shares with a writable neighbour stays. */
        uintptr_t start = (info->dlpi_addr + segment->p_vaddr + page - 1) & ~(page - 1);
        uintptr_t end = (info->dlpi_addr + segment->p_vaddr + segment->p_memsz) & ~(page - 1);
        if (end > start && madvise((void *)start, end - start, MADV_DONTNEED) == 0) *released += end - start;
    }
    return 0;
}

void cpm_release_untouched_code(void) {
    malloc_trim(0);
    size_t released = 0;
    /* dl_iterate_phdr holds the dynamic loader's lock: no library is mapped or unmapped while its
     * segments are released, and each is whole. */
    dl_iterate_phdr(release_object, &released);
    last_released = released;
}
