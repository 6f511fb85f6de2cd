/* json_tree.c - workload 3: many small objects.
 *
 * Generates a JSON document of --mb megabytes in memory (records with
 * numbers, short strings, arrays, nested objects, escapes), parses it
 * with a small recursive-descent parser into a tree (one malloc per node,
 * per key and per string, as cJSON-style parsers do), walks the tree, and
 * frees it.  The generator hashes every value it writes; the walk hashes
 * the tree in the same order: the two hashes and node counts must match.
 *
 * The document buffer is allocated once at its final size, as a program
 * that reads a file of known size would; with --grow 1 it starts at
 * 64 KiB and doubles with realloc() instead, as when reading a stream.
 *
 * Reports seconds for each phase, and with --hold-ms N sleeps N ms with
 * the tree live (so a stats dump can be taken), printing "INFO holding".
 *
 *   json_tree [--mb 48] [--seed 1] [--grow 0] [--hold-ms 0]
 */
#include "bench.h"

#include <unistd.h>

/* ---- hashing of the value stream (FNV-1a) ---- */
static inline uint64_t fnv_byte(uint64_t h, unsigned char c)
{
    return (h ^ c) * 0x100000001b3ull;
}

static uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = fnv_byte(h, (unsigned char)s[i]);
    return fnv_byte(h, 0);
}

static uint64_t fnv_i64(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++)
        h = fnv_byte(h, (unsigned char)((uint64_t)v >> (8 * i)));
    return h;
}

/* ---- generator ---- */
typedef struct {
    char *buf;
    size_t len, cap;
    uint64_t hash;
    uint64_t nodes;
    bench_rng_t rng;
} gen_t;

static void put(gen_t *g, const char *s, size_t n)
{
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 1 << 16;
        while (g->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(g->buf, cap);
        BENCH_CHECK(b, "realloc(%zu) failed", cap);
        g->buf = b;
        g->cap = cap;
    }
    memcpy(g->buf + g->len, s, n);
    g->len += n;
}

static void puts_(gen_t *g, const char *s) { put(g, s, strlen(s)); }

static void gen_string_raw(gen_t *g, int minlen, int maxlen, char tag)
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@";
    int n = (int)bench_rng_range(&g->rng, (uint64_t)minlen, (uint64_t)maxlen);
    char raw[512];
    put(g, "\"", 1);
    for (int i = 0; i < n; i++) {
        uint64_t r = bench_rng_next(&g->rng);
        char c;
        if (r % 97 == 0)
            c = "\"\\\n\t"[(r >> 8) & 3];
        else
            c = alpha[(r >> 8) % (sizeof alpha - 1)];
        raw[i] = c;
        switch (c) {
        case '"':  put(g, "\\\"", 2); break;
        case '\\': put(g, "\\\\", 2); break;
        case '\n': put(g, "\\n", 2); break;
        case '\t': put(g, "\\t", 2); break;
        default:   put(g, &c, 1); break;
        }
    }
    put(g, "\"", 1);
    g->hash = fnv_byte(g->hash, (unsigned char)tag);
    g->hash = fnv_bytes(g->hash, raw, (size_t)n);
}

static void gen_key(gen_t *g, const char *key)
{
    put(g, "\"", 1);
    puts_(g, key);
    put(g, "\":", 2);
    g->hash = fnv_byte(g->hash, 'k');
    g->hash = fnv_bytes(g->hash, key, strlen(key));
}

static void gen_str(gen_t *g, int minlen, int maxlen)
{
    gen_string_raw(g, minlen, maxlen, 's');
    g->nodes++;
}

/* Numbers carry at most two decimals; the hash takes the value x100. */
static void gen_num(gen_t *g, int decimals)
{
    int64_t v = (int64_t)(bench_rng_next(&g->rng) % 2000000) - 1000000;
    char tmp[48];
    if (decimals)
        snprintf(tmp, sizeof tmp, "%s%" PRId64 ".%02d", v < 0 ? "-" : "",
                 (v < 0 ? -v : v) / 100, (int)((v < 0 ? -v : v) % 100));
    else
        snprintf(tmp, sizeof tmp, "%" PRId64, v), v *= 100;
    puts_(g, tmp);
    g->hash = fnv_byte(g->hash, 'n');
    g->hash = fnv_i64(g->hash, v);
    g->nodes++;
}

static void gen_lit(gen_t *g, int which)
{
    static const char *lit[] = { "true", "false", "null" };
    puts_(g, lit[which]);
    g->hash = fnv_byte(g->hash, (unsigned char)"tfz"[which]);
    g->nodes++;
}

static void gen_open(gen_t *g, char c)
{
    put(g, &c, 1);
    g->hash = fnv_byte(g->hash, c == '{' ? 'o' : 'a');
    g->nodes++;
}

static void gen_close(gen_t *g, char c)
{
    put(g, &c, 1);
    g->hash = fnv_byte(g->hash, (unsigned char)c);
}

static void gen_person(gen_t *g, int depth)
{
    gen_open(g, '{');
    gen_key(g, "id"); gen_num(g, 0); put(g, ",", 1);
    gen_key(g, "name"); gen_str(g, 3, 24); put(g, ",", 1);
    gen_key(g, "email"); gen_str(g, 8, 32); put(g, ",", 1);
    gen_key(g, "score"); gen_num(g, 1); put(g, ",", 1);
    gen_key(g, "active"); gen_lit(g, (int)(bench_rng_next(&g->rng) & 1)); put(g, ",", 1);
    gen_key(g, "tags"); gen_open(g, '[');
    int nt = (int)bench_rng_range(&g->rng, 0, 6);
    for (int i = 0; i < nt; i++) {
        if (i)
            put(g, ",", 1);
        gen_str(g, 2, 10);
    }
    gen_close(g, ']'); put(g, ",", 1);
    gen_key(g, "loc"); gen_open(g, '{');
    gen_key(g, "lat"); gen_num(g, 1); put(g, ",", 1);
    gen_key(g, "lon"); gen_num(g, 1);
    gen_close(g, '}'); put(g, ",", 1);
    if (depth == 0) {
        gen_key(g, "friends"); gen_open(g, '[');
        int nf = (int)bench_rng_range(&g->rng, 0, 3);
        for (int i = 0; i < nf; i++) {
            if (i)
                put(g, ",", 1);
            gen_person(g, depth + 1);
        }
        gen_close(g, ']'); put(g, ",", 1);
        gen_key(g, "bio"); gen_str(g, 20, 200); put(g, ",", 1);
    }
    gen_key(g, "note"); gen_lit(g, 2);
    gen_close(g, '}');
}

static void generate(gen_t *g, size_t target)
{
    g->hash = 0xcbf29ce484222325ull;
    gen_open(g, '[');
    for (int first = 1; g->len < target; first = 0) {
        if (!first)
            put(g, ",\n", 2);
        gen_person(g, 0);
    }
    gen_close(g, ']');
    g->buf[g->len] = '\0';
}

/* ---- tree and parser ---- */
enum { J_NULL, J_TRUE, J_FALSE, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct node_s {
    struct node_s *next;        /* next sibling */
    char *key;                  /* member name, in objects */
    int type;
    union {
        int64_t num;            /* value x100 */
        char *str;
        struct node_s *child;
    } u;
} node_t;

typedef struct {
    const char *p;
    uint64_t nodes;
} parser_t;

static void ws(parser_t *ps)
{
    while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r')
        ps->p++;
}

static char *parse_string(parser_t *ps)
{
    BENCH_CHECK(*ps->p == '"', "parse: expected a string");
    const char *s = ++ps->p;
    size_t n = 0;
    for (const char *q = s; *q != '"'; q++, n++) {
        BENCH_CHECK(*q, "parse: unterminated string");
        if (*q == '\\')
            q++;
    }
    char *out = malloc(n + 1);
    BENCH_CHECK(out, "malloc(%zu) returned NULL", n + 1);
    char *o = out;
    while (*ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            c = *ps->p++;
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '"': case '\\': case '/': break;
            default: bench_fail("parse: unsupported escape \\%c", c);
            }
        }
        *o++ = c;
    }
    *o = '\0';
    ps->p++;
    return out;
}

static node_t *new_node(parser_t *ps, int type)
{
    node_t *n = malloc(sizeof *n);
    BENCH_CHECK(n, "malloc(%zu) returned NULL", sizeof *n);
    n->next = NULL;
    n->key = NULL;
    n->type = type;
    n->u.child = NULL;
    ps->nodes++;
    return n;
}

static node_t *parse_value(parser_t *ps);

static node_t *parse_container(parser_t *ps, int type)
{
    char close = type == J_OBJ ? '}' : ']';
    node_t *n = new_node(ps, type);
    node_t **tail = &n->u.child;
    ps->p++;
    ws(ps);
    if (*ps->p == close) {
        ps->p++;
        return n;
    }
    for (;;) {
        char *key = NULL;
        ws(ps);
        if (type == J_OBJ) {
            key = parse_string(ps);
            ws(ps);
            BENCH_CHECK(*ps->p == ':', "parse: expected ':'");
            ps->p++;
        }
        node_t *c = parse_value(ps);
        c->key = key;
        *tail = c;
        tail = &c->next;
        ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        BENCH_CHECK(*ps->p == close, "parse: expected '%c' at offset", close);
        ps->p++;
        return n;
    }
}

static node_t *parse_value(parser_t *ps)
{
    ws(ps);
    const char *p = ps->p;
    switch (*p) {
    case '{': return parse_container(ps, J_OBJ);
    case '[': return parse_container(ps, J_ARR);
    case '"': {
        char *s = parse_string(ps);
        node_t *n = new_node(ps, J_STR);
        n->u.str = s;
        return n;
    }
    case 't': BENCH_CHECK(!strncmp(p, "true", 4), "parse: bad literal");
        ps->p += 4; return new_node(ps, J_TRUE);
    case 'f': BENCH_CHECK(!strncmp(p, "false", 5), "parse: bad literal");
        ps->p += 5; return new_node(ps, J_FALSE);
    case 'n': BENCH_CHECK(!strncmp(p, "null", 4), "parse: bad literal");
        ps->p += 4; return new_node(ps, J_NULL);
    default: {
        int neg = 0;
        int64_t ip = 0, frac = 0;
        if (*ps->p == '-') {
            neg = 1;
            ps->p++;
        }
        BENCH_CHECK(*ps->p >= '0' && *ps->p <= '9', "parse: unexpected character");
        while (*ps->p >= '0' && *ps->p <= '9')
            ip = ip * 10 + (*ps->p++ - '0');
        if (*ps->p == '.') {
            ps->p++;
            int digits = 0;
            while (*ps->p >= '0' && *ps->p <= '9' && digits < 2) {
                frac = frac * 10 + (*ps->p++ - '0');
                digits++;
            }
            if (digits == 1)
                frac *= 10;
        }
        node_t *n = new_node(ps, J_NUM);
        n->u.num = (ip * 100 + frac) * (neg ? -1 : 1);
        return n;
    }
    }
}

static uint64_t walk(const node_t *n, uint64_t h, uint64_t *count)
{
    for (; n; n = n->next) {
        if (n->key) {
            h = fnv_byte(h, 'k');
            h = fnv_bytes(h, n->key, strlen(n->key));
        }
        ++*count;
        switch (n->type) {
        case J_NULL: h = fnv_byte(h, 'z'); break;
        case J_TRUE: h = fnv_byte(h, 't'); break;
        case J_FALSE: h = fnv_byte(h, 'f'); break;
        case J_NUM: h = fnv_byte(h, 'n'); h = fnv_i64(h, n->u.num); break;
        case J_STR:
            h = fnv_byte(h, 's');
            h = fnv_bytes(h, n->u.str, strlen(n->u.str));
            break;
        case J_ARR: case J_OBJ:
            h = fnv_byte(h, n->type == J_OBJ ? 'o' : 'a');
            h = walk(n->u.child, h, count);
            h = fnv_byte(h, n->type == J_OBJ ? '}' : ']');
            break;
        }
    }
    return h;
}

static void free_tree(node_t *n)
{
    while (n) {
        node_t *next = n->next;
        if (n->type == J_ARR || n->type == J_OBJ)
            free_tree(n->u.child);
        else if (n->type == J_STR)
            free(n->u.str);
        free(n->key);
        free(n);
        n = next;
    }
}

int main(int argc, char **argv)
{
    size_t mb = (size_t)bench_arg_long(argc, argv, "--mb", 48);
    uint64_t seed = (uint64_t)bench_arg_long(argc, argv, "--seed", 1);
    long hold_ms = bench_arg_long(argc, argv, "--hold-ms", 0);
    long grow = bench_arg_long(argc, argv, "--grow", 0);

    double t0 = bench_now();
    gen_t g = { 0 };
    if (!grow) {
        g.cap = (mb << 20) + (1 << 16);      /* a record is far below 64 KiB */
        g.buf = malloc(g.cap);
        BENCH_CHECK(g.buf, "malloc(%zu) returned NULL", g.cap);
    }
    bench_rng_seed(&g.rng, seed);
    generate(&g, mb << 20);
    double t1 = bench_now();

    parser_t ps = { g.buf, 0 };
    node_t *root = parse_value(&ps);
    ws(&ps);
    BENCH_CHECK(*ps.p == '\0', "parse: trailing data");
    double t2 = bench_now();

    uint64_t count = 0;
    uint64_t h = walk(root, 0xcbf29ce484222325ull, &count);
    BENCH_CHECK(count == g.nodes && ps.nodes == g.nodes,
                "node count: generated %" PRIu64 ", parsed %" PRIu64 ", walked %" PRIu64,
                g.nodes, ps.nodes, count);
    BENCH_CHECK(h == g.hash, "tree hash %016" PRIx64 " differs from the document's %016" PRIx64,
                h, g.hash);
    double t3 = bench_now();

    if (hold_ms > 0) {
        bench_info("holding %ld ms with %" PRIu64 " nodes live", hold_ms, count);
        usleep((useconds_t)hold_ms * 1000);
    }
    double t4 = bench_now();
    free_tree(root);
    free(g.buf);
    double t5 = bench_now();

    bench_info("document %.1f MiB, %" PRIu64 " nodes", (double)g.len / 1048576.0, g.nodes);
    bench_metric("nodes", (double)g.nodes, "nodes");
    bench_metric("generate_s", t1 - t0, "s");
    bench_metric("parse_s", t2 - t1, "s");
    bench_metric("walk_s", t3 - t2, "s");
    bench_metric("free_s", t5 - t4, "s");
    bench_metric("total_s", (t5 - t4) + (t3 - t0), "s");
    bench_ok();
    return 0;
}
