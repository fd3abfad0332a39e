/*
 * The driver hook's GOT slots (driver_hook.c says why): in every loaded ELF object but kname's
 * own and those is_left_alone names, each JUMP_SLOT or GLOB_DAT relocation of a symbol whose
 * name the hook's `replace` function answers for is rewritten, and remembered so that
 * got_restore() writes the first value back. RELRO pages are made writable for each write.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "_native_c/launch.h"
#include "_native_c/got_slots.h"

#ifdef KNAME_DRIVER_HOOK
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    void **slot;
    void *before;
    int relro; /* read-only after relocation: made writable for each write */
} Written;

static Written *written;
static size_t written_count, written_capacity;
static unsigned long long objects_seen; /* dl_iterate_phdr's adds when last scanned */
static ElfW(Addr) own_base;
static int scan_failed;
static int installed;        /* slots may be written (under slots_lock) */
static SlotReplacement replace;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

static int
write_slot(void **slot, void *value, int relro)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)slot & ~(uintptr_t)(page - 1);
    size_t length = ((uintptr_t)(slot + 1) - start + (size_t)page - 1) & ~(size_t)(page - 1);
    if (relro && mprotect((void *)start, length, PROT_READ | PROT_WRITE) != 0)
        return 0;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (relro)
        mprotect((void *)start, length, PROT_READ);
    return 1;
}

static int
remember_written(void **slot, void *before, int relro)
{
    for (size_t i = 0; i < written_count; i++)
        if (written[i].slot == slot)
            return 1; /* written before: its `before` stays the first one */
    if (written_count == written_capacity) {
        size_t capacity = written_capacity ? 2 * written_capacity : 64;
        Written *grown = realloc(written, capacity * sizeof *grown);
        if (grown == NULL)
            return 0;
        written = grown;
        written_capacity = capacity;
    }
    written[written_count++] = (Written){slot, before, relro};
    return 1;
}

static ElfW(Addr)
dynamic_address(ElfW(Addr) base, ElfW(Addr) value)
{
    return value < base ? base + value : value; /* glibc relocates most of them in place */
}

static void
patch_relocations(const ElfW(Rela) * rela, size_t size, const ElfW(Sym) * symtab,
                  const char *strtab, ElfW(Addr) base, void *low, void *high, ElfW(Addr) relro_lo,
                  ElfW(Addr) relro_hi)
{
    for (size_t i = 0; i < size / sizeof *rela; i++) {
        unsigned long type = ELF64_R_TYPE(rela[i].r_info);
#if defined(__x86_64__)
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
            continue;
#else
        if (type != R_AARCH64_JUMP_SLOT && type != R_AARCH64_GLOB_DAT)
            continue;
#endif
        unsigned long index = ELF64_R_SYM(rela[i].r_info);
        if (index == 0)
            continue;
        const char *name = strtab + symtab[index].st_name;
        if (name[0] != 'd' && !(name[0] == 'c' && name[1] == 'u'))
            continue;
        void **slot = (void **)(base + rela[i].r_offset);
        void *current = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        void *replacement = replace(name, current, low, high);
        if (replacement == NULL || replacement == current)
            continue;
        int relro = (ElfW(Addr))slot >= relro_lo && (ElfW(Addr))slot < relro_hi;
        if (!remember_written(slot, current, relro) || !write_slot(slot, replacement, relro))
            scan_failed = 1;
    }
}

/* Objects whose slots stay: the driver's own, and a profiler's (CUPTI, Nsight's injections),
 * which must see the driver as it is. */
static int
is_left_alone(const char *name)
{
    static const char *const alone[] = {"linux-vdso", "libcuda.so", "cupti", "nvperf", "njection",
                                        "Nsight", "nsight", "TreeLauncher", "libnvtx"};
    for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++)
        if (strstr(name, alone[i]) != NULL)
            return 1;
    return 0;
}

static int
patch_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    ElfW(Addr) base = info->dlpi_addr;
    /* Not kname's own slots (its calls are the originals), nor the driver's own. */
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (base == own_base || is_left_alone(name))
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    ElfW(Addr) low = UINTPTR_MAX, high = 0, relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_LOAD) {
            if (base + ph->p_vaddr < low)
                low = base + ph->p_vaddr;
            if (base + ph->p_vaddr + ph->p_memsz > high)
                high = base + ph->p_vaddr + ph->p_memsz;
        } else if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = base + ph->p_vaddr;
            relro_hi = relro_lo + ph->p_memsz;
        }
    }
    if (dyn == NULL)
        return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_size = 0, rela_size = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            symtab = (const ElfW(Sym) *)dynamic_address(base, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strtab = (const char *)dynamic_address(base, dyn->d_un.d_ptr);
            break;
        case DT_JMPREL:
            jmprel = (const ElfW(Rela) *)dynamic_address(base, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            jmprel_size = dyn->d_un.d_val;
            break;
        case DT_RELA:
            rela = (const ElfW(Rela) *)dynamic_address(base, dyn->d_un.d_ptr);
            break;
        case DT_RELASZ:
            rela_size = dyn->d_un.d_val;
            break;
        }
    }
    if (symtab == NULL || strtab == NULL)
        return 0;
    if (jmprel != NULL)
        patch_relocations(jmprel, jmprel_size, symtab, strtab, base, (void *)low, (void *)high,
                          relro_lo, relro_hi);
    if (rela != NULL)
        patch_relocations(rela, rela_size, symtab, strtab, base, (void *)low, (void *)high,
                          relro_lo, relro_hi);
    return 0;
}

static int
count_objects(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

void
got_begin(void *own_base_address, SlotReplacement replacement)
{
    pthread_mutex_lock(&slots_lock);
    own_base = (ElfW(Addr))own_base_address;
    replace = replacement;
    installed = 1;
    scan_failed = 0;
    objects_seen = 0;
    pthread_mutex_unlock(&slots_lock);
}

/* Every object loaded since the last scan patched (all of them: a scan is cheap next to a load). */
int
got_rescan(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(count_objects, &adds);
    pthread_mutex_lock(&slots_lock);
    if (installed && adds != objects_seen) {
        objects_seen = adds;
        dl_iterate_phdr(patch_object, NULL);
    }
    int fine = !scan_failed;
    pthread_mutex_unlock(&slots_lock);
    return fine;
}

void
got_restore(void)
{
    pthread_mutex_lock(&slots_lock);
    for (size_t i = written_count; i-- > 0;)
        write_slot(written[i].slot, written[i].before, written[i].relro);
    written_count = 0;
    installed = 0;
    pthread_mutex_unlock(&slots_lock);
}

size_t
got_slots_written(int *is_installed)
{
    pthread_mutex_lock(&slots_lock);
    size_t count = written_count;
    *is_installed = installed;
    pthread_mutex_unlock(&slots_lock);
    return count;
}

#endif /* KNAME_DRIVER_HOOK */
