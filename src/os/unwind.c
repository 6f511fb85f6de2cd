/* unwind.c - the stack walk (unwind.h).
 *
 * A frame of x86-64 code is described, at each instruction, by a rule
 * for its canonical frame address (CFA: the stack pointer of its caller
 * just before the call), which is rsp or rbp plus an offset; the return
 * address is at CFA - 8, and rbp, where the function saved it, at CFA
 * plus an offset.  The rules are the rows of the CFA program of the
 * function's FDE (DWARF 5, 6.4; the .eh_frame form of the x86-64 psABI),
 * run from the function's start to the address.  So one step from a
 * frame (rip, rsp, rbp) is: the rule at rip, CFA from it, rip = the word
 * at CFA - 8, rbp = the saved one or the same, rsp = CFA.
 *
 * Finding and running the program costs a binary search of the
 * object's .eh_frame_hdr table and a walk of its instructions, so the
 * rule found for an address is kept in `rules`, direct-mapped, for every
 * thread: a stack seen once costs a table look-up a frame after that.
 * An entry names the object it came from (the start and end of its
 * mapping and its .eh_frame_hdr), which _dl_find_object gives (lock-free,
 * a search of the loaded objects) each time the walk enters another
 * object - but the program's and shoal's own, which are kept once found
 * (they are never unloaded): a rule is not used for code that was
 * unloaded and replaced by another object at the same address - unless
 * that object has the same extent and layout (a rebuild of the same
 * library, loaded where the old one was), whose stale rules could then
 * send a walk through it astray.
 *
 * What is read: the .eh_frame data of loaded objects, and words of the
 * walking thread's own stack, each at an address between the stack
 * pointer where the walk started and at most STACK_SPAN above it, the
 * CFAs rising strictly from frame to frame.  Like libunwind's, the walk
 * trusts the rules it is given; the bounds stop it where they are wrong.
 */
#define _GNU_SOURCE
#include "unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "os.h"

#if defined(__x86_64__) && defined(DLFO_EH_SEGMENT_TYPE)

#define STACK_SPAN ((uintptr_t)256 << 20)       /* a stack's bound, above the walk's start */

/* ---- the rule of a frame -------------------------------------------------
 * Packed in one word: how the CFA is found (from rsp or rbp, plus
 * cfa_off), where rbp was saved (rbp_off from the CFA, 0: not saved,
 * so the caller's rbp is this frame's), and the kind. */
enum kind {
    RULE_STEP = 1,      /* a frame to step out of */
    RULE_END,           /* the outermost frame (its return address is undefined) */
    RULE_NONE,          /* no rule to be had: the walk stops */
};

#define RULE_CFA_RBP (1u << 8)          /* the CFA is rbp + cfa_off (else rsp) */
#define RULE_RBP_LOST (1u << 9)         /* rbp's rule is one this walk cannot follow */

static uint64_t rule_pack(enum kind kind, unsigned flags, int32_t cfa_off, int16_t rbp_off)
{
    return (uint64_t)kind | flags | (uint64_t)(uint16_t)rbp_off << 16 |
           (uint64_t)(uint32_t)cfa_off << 32;
}

static enum kind rule_kind(uint64_t r) { return (enum kind)(r & 0xff); }
static int32_t rule_cfa_off(uint64_t r) { return (int32_t)(uint32_t)(r >> 32); }
static int16_t rule_rbp_off(uint64_t r) { return (int16_t)(uint16_t)(r >> 16); }

/* ---- reading .eh_frame ------------------------------------------------- */

struct reader {
    const uint8_t *p, *end;
    bool bad;                   /* read past the end, or an encoding not handled */
};

static uint8_t read_u8(struct reader *r)
{
    if (r->p >= r->end) {
        r->bad = true;
        return 0;
    }
    return *r->p++;
}

static uint64_t read_uleb(struct reader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = read_u8(r);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

static int64_t read_sleb(struct reader *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        b = read_u8(r);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while ((b & 0x80) && !r->bad);
    if (shift < 64 && (b & 0x40))
        v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

static uint64_t read_fixed(struct reader *r, size_t size)
{
    if ((size_t)(r->end - r->p) < size) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, r->p, size);     /* little-endian */
    r->p += size;
    return v;
}

static void skip(struct reader *r, uint64_t n)
{
    if (n > (uint64_t)(r->end - r->p))
        r->bad = true;
    else
        r->p += n;
}

/* The pointer encodings of .eh_frame (DW_EH_PE_*). */
enum {
    PE_OMIT = 0xff,
    PE_ABSPTR = 0x00, PE_ULEB128 = 0x01, PE_UDATA2 = 0x02, PE_UDATA4 = 0x03,
    PE_UDATA8 = 0x04, PE_SLEB128 = 0x09, PE_SDATA2 = 0x0a, PE_SDATA4 = 0x0b,
    PE_SDATA8 = 0x0c,
    PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80,
};

/* A value of encoding `enc`; pc-relative ones from where they stand,
 * data-relative ones from `data` (the .eh_frame_hdr). */
static uintptr_t read_encoded(struct reader *r, uint8_t enc, uintptr_t data)
{
    uintptr_t at = (uintptr_t)r->p, v;
    switch (enc & 0x0f) {
    case PE_ABSPTR: case PE_UDATA8: case PE_SDATA8: v = read_fixed(r, 8); break;
    case PE_ULEB128: v = read_uleb(r); break;
    case PE_SLEB128: v = (uintptr_t)read_sleb(r); break;
    case PE_UDATA2: v = read_fixed(r, 2); break;
    case PE_SDATA2: v = (uintptr_t)(int16_t)read_fixed(r, 2); break;
    case PE_UDATA4: v = read_fixed(r, 4); break;
    case PE_SDATA4: v = (uintptr_t)(int32_t)read_fixed(r, 4); break;
    default: r->bad = true; return 0;
    }
    switch (enc & 0x70) {
    case 0: break;
    case PE_PCREL: v += at; break;
    case PE_DATAREL: v += data; break;
    default: r->bad = true;     /* text- and function-relative: not in .eh_frame */
    }
    return v;                   /* PE_INDIRECT: only skipped, never followed */
}

/* ---- the CFA program --------------------------------------------------- */

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

enum reg_rule { REG_SAME, REG_OFFSET, REG_UNDEFINED, REG_OTHER };

struct row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_expr;              /* the CFA is a DWARF expression */
    enum reg_rule rbp, ra;
    int64_t rbp_off, ra_off;
};

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool signal;                /* 'S': a signal frame */
    bool fde_data;              /* 'z': FDEs have augmentation data */
    struct reader insns;
};

#define STATE_DEPTH 8           /* DW_CFA_remember_state nesting */

static void set_rule(struct row *row, uint64_t reg, uint64_t ra_reg, enum reg_rule rule,
                     int64_t off)
{
    if (reg == REG_RBP) {
        row->rbp = rule;
        row->rbp_off = off;
    } else if (reg == ra_reg) {
        row->ra = rule;
        row->ra_off = off;
    }
}

/* Run `r` from location `loc` until the row that covers `pc`; `initial`
 * is the row after the CIE's instructions (DW_CFA_restore), NULL while
 * running them.  false where an instruction is not known. */
static bool run_program(struct reader *r, const struct cie *cie, uintptr_t loc, uintptr_t pc,
                        struct row *row, const struct row *initial)
{
    struct row saved[STATE_DEPTH];
    unsigned depth = 0;
    while (r->p < r->end && !r->bad) {
        uint8_t op = read_u8(r);
        uint64_t reg, delta = 0;
        switch (op >> 6) {
        case 1:                                 /* DW_CFA_advance_loc */
            delta = op & 0x3f;
            goto advance;
        case 2:                                 /* DW_CFA_offset */
            set_rule(row, op & 0x3f, cie->ra_reg, REG_OFFSET,
                     (int64_t)read_uleb(r) * cie->data_align);
            continue;
        case 3:                                 /* DW_CFA_restore */
            reg = op & 0x3f;
            goto restore;
        }
        switch (op) {
        case 0x00:                              /* DW_CFA_nop */
            continue;
        case 0x01: {                            /* DW_CFA_set_loc */
            uintptr_t to = read_encoded(r, cie->fde_enc, 0);
            if (to > pc)
                return true;
            loc = to;
            continue;
        }
        case 0x02: delta = read_fixed(r, 1); goto advance;
        case 0x03: delta = read_fixed(r, 2); goto advance;
        case 0x04: delta = read_fixed(r, 4); goto advance;
        case 0x05:                              /* DW_CFA_offset_extended */
            reg = read_uleb(r);
            set_rule(row, reg, cie->ra_reg, REG_OFFSET, (int64_t)read_uleb(r) * cie->data_align);
            continue;
        case 0x06:                              /* DW_CFA_restore_extended */
            reg = read_uleb(r);
            goto restore;
        case 0x07:                              /* DW_CFA_undefined */
            set_rule(row, read_uleb(r), cie->ra_reg, REG_UNDEFINED, 0);
            continue;
        case 0x08:                              /* DW_CFA_same_value */
            set_rule(row, read_uleb(r), cie->ra_reg, REG_SAME, 0);
            continue;
        case 0x09:                              /* DW_CFA_register */
            reg = read_uleb(r);
            read_uleb(r);
            set_rule(row, reg, cie->ra_reg, REG_OTHER, 0);
            continue;
        case 0x0a:                              /* DW_CFA_remember_state */
            if (depth == STATE_DEPTH)
                return false;
            saved[depth++] = *row;
            continue;
        case 0x0b:                              /* DW_CFA_restore_state */
            if (depth == 0)
                return false;
            *row = saved[--depth];
            continue;
        case 0x0c:                              /* DW_CFA_def_cfa */
            row->cfa_reg = read_uleb(r);
            row->cfa_off = (int64_t)read_uleb(r);
            row->cfa_expr = false;
            continue;
        case 0x0d:                              /* DW_CFA_def_cfa_register */
            row->cfa_reg = read_uleb(r);
            row->cfa_expr = false;
            continue;
        case 0x0e:                              /* DW_CFA_def_cfa_offset */
            row->cfa_off = (int64_t)read_uleb(r);
            continue;
        case 0x0f:                              /* DW_CFA_def_cfa_expression */
            skip(r, read_uleb(r));
            row->cfa_expr = true;
            continue;
        case 0x10:                              /* DW_CFA_expression */
        case 0x16:                              /* DW_CFA_val_expression */
            reg = read_uleb(r);
            skip(r, read_uleb(r));
            set_rule(row, reg, cie->ra_reg, REG_OTHER, 0);
            continue;
        case 0x11:                              /* DW_CFA_offset_extended_sf */
            reg = read_uleb(r);
            set_rule(row, reg, cie->ra_reg, REG_OFFSET, read_sleb(r) * cie->data_align);
            continue;
        case 0x12:                              /* DW_CFA_def_cfa_sf */
            row->cfa_reg = read_uleb(r);
            row->cfa_off = read_sleb(r) * cie->data_align;
            row->cfa_expr = false;
            continue;
        case 0x13:                              /* DW_CFA_def_cfa_offset_sf */
            row->cfa_off = read_sleb(r) * cie->data_align;
            continue;
        case 0x14:                              /* DW_CFA_val_offset */
        case 0x15:                              /* DW_CFA_val_offset_sf */
            reg = read_uleb(r);
            if (op == 0x14)
                read_uleb(r);
            else
                read_sleb(r);
            set_rule(row, reg, cie->ra_reg, REG_OTHER, 0);
            continue;
        case 0x2e:                              /* DW_CFA_GNU_args_size */
            read_uleb(r);
            continue;
        case 0x2f:                              /* DW_CFA_GNU_negative_offset_extended */
            reg = read_uleb(r);
            set_rule(row, reg, cie->ra_reg, REG_OFFSET, -(int64_t)read_uleb(r) * cie->data_align);
            continue;
        default:
            return false;
        }
    advance:
        loc += delta * cie->code_align;
        if (loc > pc)
            return true;
        continue;
    restore:
        if (initial == NULL)
            return false;
        if (reg == REG_RBP) {
            row->rbp = initial->rbp;
            row->rbp_off = initial->rbp_off;
        } else if (reg == cie->ra_reg) {
            row->ra = initial->ra;
            row->ra_off = initial->ra_off;
        }
    }
    return !r->bad;
}

/* The CIE at `at`; false if it is not one this walk reads. */
static bool read_cie(const uint8_t *at, struct cie *cie)
{
    struct reader r = { at, at + 8, false };
    uint64_t len = read_fixed(&r, 4);
    if (len == 0 || len >= 0xfffffff0u)         /* 64-bit DWARF: never in .eh_frame */
        return false;
    r.end = at + 4 + len;
    if (read_fixed(&r, 4) != 0 || r.bad)        /* a CIE's id is 0 in .eh_frame */
        return false;
    uint8_t version = read_u8(&r);
    if (version != 1 && version != 3)
        return false;
    const char *aug = (const char *)r.p;
    size_t aug_len = strnlen(aug, (size_t)(r.end - r.p));
    r.p += aug_len + 1;
    if (aug[0] != '\0' && aug[0] != 'z')
        return false;
    cie->code_align = read_uleb(&r);
    cie->data_align = read_sleb(&r);
    cie->ra_reg = version == 1 ? read_u8(&r) : read_uleb(&r);
    cie->fde_enc = PE_ABSPTR;
    cie->signal = false;
    cie->fde_data = aug[0] == 'z';
    if (cie->fde_data) {
        uint64_t data_len = read_uleb(&r);
        if (data_len > (uint64_t)(r.end - r.p))
            return false;
        const uint8_t *data_end = r.p + data_len;
        for (size_t i = 1; i < aug_len && !r.bad; i++) {
            switch (aug[i]) {
            case 'R': cie->fde_enc = read_u8(&r); break;
            case 'L': read_u8(&r); break;
            case 'P': read_encoded(&r, read_u8(&r) & (uint8_t)~PE_INDIRECT, 0); break;
            case 'S': cie->signal = true; break;
            default: return false;      /* a letter not known: what follows is not read right */
            }
        }
        r.p = data_end;
    }
    cie->insns = r;
    return !r.bad && r.p <= r.end;
}

/* The FDE for pc in the object whose .eh_frame_hdr is `hdr`: its table
 * is sorted by start address (binary search for the last at or below
 * pc).  NULL if there is no table of the usual encoding or no entry. */
static const uint8_t *find_fde(const uint8_t *hdr, uintptr_t pc)
{
    if (hdr[0] != 1)
        return NULL;
    struct reader r = { hdr + 4, hdr + 4 + 16, false };
    read_encoded(&r, hdr[1], (uintptr_t)hdr);           /* eh_frame_ptr */
    if (hdr[2] == PE_OMIT || hdr[3] != (PE_DATAREL | PE_SDATA4))
        return NULL;
    uint64_t count = read_encoded(&r, hdr[2], (uintptr_t)hdr);
    if (r.bad || count == 0)
        return NULL;
    const int32_t *table = (const int32_t *)r.p;        /* (start, fde) pairs */
    uint64_t lo = 0, hi = count;                        /* table[2 * lo] <= pc, if any */
    if ((uintptr_t)hdr + table[0] > pc)
        return NULL;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)hdr + table[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    return hdr + table[2 * lo + 1];
}

/* The rule at pc, from the object whose .eh_frame_hdr is `hdr`.  Cold: a
 * rule is derived once an address, and the walk's loop keeps its
 * registers. */
static __attribute__((noinline, cold)) uint64_t derive_rule(const uint8_t *hdr, uintptr_t pc)
{
    const uint8_t *fde = find_fde(hdr, pc);
    if (fde == NULL)
        return rule_pack(RULE_NONE, 0, 0, 0);
    struct reader r = { fde, fde + 8, false };
    uint64_t len = read_fixed(&r, 4);
    if (len == 0 || len >= 0xfffffff0u)
        return rule_pack(RULE_NONE, 0, 0, 0);
    r.end = fde + 4 + len;
    const uint8_t *cie_field = r.p;     /* the CIE pointer counts back from here */
    const uint8_t *cie_at = cie_field - (uint32_t)read_fixed(&r, 4);
    struct cie cie;
    if (r.bad || !read_cie(cie_at, &cie) || cie.signal)
        return rule_pack(RULE_NONE, 0, 0, 0);
    uintptr_t start = read_encoded(&r, cie.fde_enc, 0);
    uintptr_t range = read_encoded(&r, cie.fde_enc & 0x0f, 0);
    if (cie.fde_data)           /* (the LSDA: nothing of frames) */
        skip(&r, read_uleb(&r));
    if (r.bad || pc < start || pc - start >= range)
        return rule_pack(RULE_NONE, 0, 0, 0);

    struct row row = { .cfa_reg = REG_RSP, .rbp = REG_SAME, .ra = REG_UNDEFINED };
    if (!run_program(&cie.insns, &cie, start, UINTPTR_MAX, &row, NULL))
        return rule_pack(RULE_NONE, 0, 0, 0);
    struct row initial = row;
    if (!run_program(&r, &cie, start, pc, &row, &initial))
        return rule_pack(RULE_NONE, 0, 0, 0);

    if (row.ra == REG_UNDEFINED)
        return rule_pack(RULE_END, 0, 0, 0);
    if (row.cfa_expr || (row.cfa_reg != REG_RSP && row.cfa_reg != REG_RBP) ||
        row.cfa_off != (int32_t)row.cfa_off || row.ra != REG_OFFSET || row.ra_off != -8)
        return rule_pack(RULE_NONE, 0, 0, 0);
    unsigned flags = row.cfa_reg == REG_RBP ? RULE_CFA_RBP : 0;
    int16_t rbp_off = 0;
    if (row.rbp == REG_OFFSET && row.rbp_off <= -8 && (row.rbp_off & 7) == 0 &&
        row.rbp_off >= INT16_MIN)       /* a whole word below the CFA */
        rbp_off = (int16_t)row.rbp_off;
    else if (row.rbp != REG_SAME)
        flags |= RULE_RBP_LOST;
    return rule_pack(RULE_STEP, flags, (int32_t)row.cfa_off, rbp_off);
}

static uintptr_t rotl(uintptr_t x, unsigned k)
{
    return x << k | x >> (64 - k);
}

/* ---- the table of rules -------------------------------------------------
 * Direct-mapped by address; each entry a sequence lock: `seq` is odd
 * while a writer fills the entry, and grows by two with each fill.
 *
 * Memory order.  A writer claims the entry by a CAS of an even `seq` to
 * seq + 1 (relaxed: the claim orders nothing by itself), then a release
 * fence, then stores the three words (relaxed) and publishes with a
 * release store of seq + 2.  A reader loads `seq` (acquire: if it is a
 * writer's published value, that writer's words are visible), loads
 * the words (relaxed), then an acquire fence, then `seq` again.  If any
 * of its word loads read a later writer's store, that writer's release
 * fence synchronises with the reader's acquire fence, so the writer's
 * claim is visible to the second load of `seq`, which then differs from
 * the first: the reader takes the words only if `seq` is even and the
 * same both times, and then they are all of one fill.  Two writers of
 * one entry: the second's CAS fails, and it does not cache. */
#define RULE_BITS 12

static struct rule_slot {
    _Atomic uint64_t seq;
    _Atomic uintptr_t pc, object;       /* the address, and its object's mapping */
    _Atomic uint64_t rule;
} rules[1u << RULE_BITS] SHOAL_SELDOM_BSS;

/* The object a walk is in: a stack's frames are mostly in a few
 * objects, one after another, so a walk asks _dl_find_object only when
 * it crosses into another (no object it walks through can be unloaded
 * meanwhile: its code is on the walking thread's stack). */
struct object_memo {
    uintptr_t start, end;               /* its mapping; start == end: none yet */
    uintptr_t id;                       /* the mapping and its .eh_frame_hdr, hashed */
    const uint8_t *eh_frame_hdr;
};

/* Objects that are never unloaded - the program itself, and shoal's
 * own (linked -z nodelete, or part of the program) - are kept from one
 * walk to the next, so that a walk asks _dl_find_object only for the
 * others: most stacks cross into both (_dl_find_object: about 60
 * instructions a call; a heap profile's sample of thread_churn 1,468
 * -> 1,348 instructions with both kept).
 *
 * Memory order.  An entry is written once, by the thread whose CAS
 * takes `claimed` from 0: it stores the memo's words (relaxed), then
 * publishes with a release store of `ready`; a reader that loads
 * `ready` true (acquire) sees them whole.  A second finder's CAS fails
 * and it writes nothing; the values it would write are the same. */
enum { PERMANENT_PROGRAM, PERMANENT_OWN, PERMANENTS };

static struct permanent {
    _Atomic bool claimed, ready;
    struct object_memo memo;
} permanent[PERMANENTS] SHOAL_SELDOM_BSS;

static bool permanent_of(uintptr_t pc, struct object_memo *m)
{
    for (unsigned i = 0; i < PERMANENTS; i++) {
        struct permanent *e = &permanent[i];
        if (atomic_load_explicit(&e->ready, memory_order_acquire) &&
            pc - e->memo.start < e->memo.end - e->memo.start) {
            *m = e->memo;
            return true;
        }
    }
    return false;
}

/* m, just found by _dl_find_object for obj, is kept if it is one of the
 * objects above. */
static void permanent_keep(const struct object_memo *m, const struct dl_find_object *obj)
{
    unsigned i;
    uintptr_t own = (uintptr_t)&permanent_keep;
    if (own - m->start < m->end - m->start)
        i = PERMANENT_OWN;
    else if (obj->dlfo_link_map != NULL && obj->dlfo_link_map->l_name != NULL &&
             obj->dlfo_link_map->l_name[0] == '\0')
        i = PERMANENT_PROGRAM;          /* the program's link map is named "" */
    else
        return;
    struct permanent *e = &permanent[i];
    bool no = false;
    if (!atomic_compare_exchange_strong_explicit(&e->claimed, &no, true, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    e->memo = *m;
    atomic_store_explicit(&e->ready, true, memory_order_release);
}

static bool object_of(uintptr_t pc, struct object_memo *m)
{
    if (pc - m->start < m->end - m->start || permanent_of(pc, m))
        return true;
    struct dl_find_object obj;
    if (_dl_find_object((void *)pc, &obj) != 0 || obj.dlfo_eh_frame == NULL)
        return false;
    m->start = (uintptr_t)obj.dlfo_map_start;
    m->end = (uintptr_t)obj.dlfo_map_end;
    m->id = m->start ^ rotl(m->end, 21) ^ rotl((uintptr_t)obj.dlfo_eh_frame, 42);
    m->eh_frame_hdr = obj.dlfo_eh_frame;
    permanent_keep(m, &obj);
    return true;
}

static uint64_t rule_of(uintptr_t pc, struct object_memo *m)
{
    if (!object_of(pc, m))
        return rule_pack(RULE_NONE, 0, 0, 0);
    uintptr_t object = m->id;
    struct rule_slot *s = &rules[(pc * 0x9e3779b97f4a7c15u) >> (64 - RULE_BITS)];
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (!(seq & 1)) {
        uintptr_t p = atomic_load_explicit(&s->pc, memory_order_relaxed);
        uintptr_t o = atomic_load_explicit(&s->object, memory_order_relaxed);
        uint64_t rule = atomic_load_explicit(&s->rule, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (p == pc && o == object && atomic_load_explicit(&s->seq, memory_order_relaxed) == seq)
            return rule;
    }
    uint64_t rule = derive_rule(m->eh_frame_hdr, pc);
    if (!(seq & 1) && atomic_compare_exchange_strong_explicit(&s->seq, &seq, seq + 1,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed)) {
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&s->pc, pc, memory_order_relaxed);
        atomic_store_explicit(&s->object, object, memory_order_relaxed);
        atomic_store_explicit(&s->rule, rule, memory_order_relaxed);
        atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
    }
    return rule;
}

bool shoal_os_unwind_supported(void)
{
    return true;
}

/* Return address ip of the walk, which holds n of them in pcs: kept,
 * or, where it is in the caller's own code, dropped with all before it.
 * Returns how many pcs holds now. */
static unsigned walk_keep(void **pcs, unsigned n, uintptr_t ip, const void *own_lo,
                          const void *own_hi)
{
    if (ip - (uintptr_t)own_lo < (uintptr_t)own_hi - (uintptr_t)own_lo)
        return 0;
    pcs[n] = (void *)ip;
    return n + 1;
}

/* The walk reads the stack words of other frames: no sanitizer's
 * business (a return address is no object of the program). */
__attribute__((noinline, no_sanitize("address")))
unsigned shoal_os_unwind(void **pcs, unsigned max, const void *own_lo, const void *own_hi,
                         const void *frame)
{
    uintptr_t ip, sp, bp, at;
    unsigned n = 0;
    if (frame != NULL) {
        /* The frame's prologue pushed the caller's rbp at `frame` after
         * the call pushed the return address above it: the caller's
         * state at that call is this, its return address the walk's
         * first, and its first rule that of the call (ip - 1), as for
         * every frame after the first below. */
        const uintptr_t *fp = frame;
        ip = fp[1];
        bp = fp[0];
        sp = (uintptr_t)frame + 16;
        at = ip - 1;
        if (ip == 0 || max == 0)
            return 0;
        n = walk_keep(pcs, n, ip, own_lo, own_hi);
    } else {
        /* rip and rsp of one instruction: the rule at ip holds for this
         * sp.  The first rule is of this function at ip itself; after
         * it, of the call instruction (ip - 1: a return address may be a
         * function's end, its next function's start). */
        __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                         : "=&r"(ip), "=&r"(sp), "=r"(bp));   /* none of them rbp before it is read */
        at = ip;
    }
    uintptr_t low = sp;
    bool bp_known = true;
    struct object_memo memo = { 0, 0, 0, NULL };
    for (; n < max; at = ip - 1) {
        uint64_t rule = rule_of(at, &memo);
        if (rule_kind(rule) != RULE_STEP)
            break;
        if ((rule & RULE_CFA_RBP) && !bp_known)
            break;
        uintptr_t cfa = ((rule & RULE_CFA_RBP) ? bp : sp) + (uintptr_t)(intptr_t)rule_cfa_off(rule);
        if (cfa < sp + 8 || cfa - low > STACK_SPAN || (cfa & 7) != 0)
            break;              /* (the return address is at cfa - 8, at or above sp) */
        ip = *(const uintptr_t *)(cfa - 8);
        int16_t rbp_off = rule_rbp_off(rule);
        if (rbp_off != 0) {
            uintptr_t saved = cfa + (uintptr_t)(intptr_t)rbp_off;
            if (saved < sp)
                break;
            bp = *(const uintptr_t *)saved;
        }
        if (rule & RULE_RBP_LOST)
            bp_known = false;
        sp = cfa;
        if (ip == 0)
            break;
        n = walk_keep(pcs, n, ip, own_lo, own_hi);
    }
    return n;
}

#else

bool shoal_os_unwind_supported(void)
{
    return false;
}

unsigned shoal_os_unwind(void **pcs, unsigned max, const void *own_lo, const void *own_hi,
                         const void *frame)
{
    (void)pcs;
    (void)max;
    (void)own_lo;
    (void)own_hi;
    (void)frame;
    return 0;
}

#endif
