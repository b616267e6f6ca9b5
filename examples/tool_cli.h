/* examples/tool_cli.h - the command line of the example tools (build/graph,
 * build/table): commands, each taking some files and some options, every
 * option with its argument and a line of help, so that --help, the checks
 * and the messages come from one table.
 *
 *   static const cli_option opts[] = {{"--threads", "T", "host threads", O_THREADS}, ...};
 *   static const cli_command cmds[] = {{"query", "FILE", "what it does", 1, 1, O_THREADS}, ...};
 *   static const cli_tool tool = {"table", cmds, 2, opts, 5, "table COMMAND --help: ..."};
 *   if (bad) return cli_bad_args(&tool, cmd, "--threads %s: want 1..1024", a);   // exit status 2
 *   cli_print_usage(&tool, stdout, cmd);                                         // cmd NULL: all
 *
 * A bad argument is named, one usage line follows, and the status is 2.
 */
#ifndef GPUMEM_EXAMPLES_TOOL_CLI_H
#define GPUMEM_EXAMPLES_TOOL_CLI_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cli_option {
    const char *name, *arg, *what; /* arg NULL: a flag */
    uint64_t bit;
} cli_option;

typedef struct cli_command {
    const char *name, *args, *what;
    int files_min, files_max;
    uint64_t opts; /* the cli_option bits it takes */
} cli_command;

typedef struct cli_tool {
    const char *name;
    const cli_command *commands;
    size_t n_commands;
    const cli_option *options;
    size_t n_options;
    const char *footer; /* after the list of every command */
} cli_tool;

/* Usage of one command (or all, cmd NULL): to stdout when asked for, to
 * stderr after an error. */
static void cli_print_usage(const cli_tool *t, FILE *f, const cli_command *cmd) {
    size_t c, i;
    for (c = 0; c < t->n_commands; c++) {
        const cli_command *k = &t->commands[c];
        if (cmd && cmd != k) continue;
        fprintf(f, "%s %s %s %s [options]\n", cmd || c == 0 ? "usage:" : "      ", t->name, k->name, k->args);
        if (cmd) {
            fprintf(f, "  %s\noptions:\n", k->what);
            for (i = 0; i < t->n_options; i++)
                if (k->opts & t->options[i].bit)
                    fprintf(f, "  %-14s %-5s %s\n", t->options[i].name, t->options[i].arg ? t->options[i].arg : "",
                            t->options[i].what);
        }
    }
    if (!cmd) fprintf(f, "%s", t->footer);
}

/* A bad argument: the message names it, then one line of usage; exit 2. */
static int cli_bad_args(const cli_tool *t, const cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", t->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nusage: %s %s %s [options]; %s %s --help lists them\n", t->name, cmd->name, cmd->args,
                t->name, cmd->name);
    else fprintf(stderr, "\n%s --help lists the commands\n", t->name);
    return 2;
}

/* The command named argv[1], or NULL after a message (*rc 2) or for --help
 * (*rc 0, *help 1). */
static const cli_command *cli_command_of(const cli_tool *t, int argc, char **argv, int *help, int *rc) {
    size_t c;
    *help = 0;
    *rc = 0;
    if (argc < 2) {
        *rc = cli_bad_args(t, NULL, "name a command");
        return NULL;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        *help = 1;
        return NULL;
    }
    for (c = 0; c < t->n_commands; c++)
        if (!strcmp(argv[1], t->commands[c].name)) return &t->commands[c];
    *rc = cli_bad_args(t, NULL, "unknown command '%s'", argv[1]);
    return NULL;
}

/* The option argv[*i] names, checked against the command (NULL after a
 * message, *rc 2); its value, if it takes one, in *value (*i moves past it). */
static const cli_option *cli_option_of(const cli_tool *t, const cli_command *cmd, int argc, char **argv, int *i,
                                       const char **value, int *rc) {
    const char *a = argv[*i];
    size_t d;
    *value = NULL;
    for (d = 0; d < t->n_options; d++)
        if (!strcmp(a, t->options[d].name)) break;
    if (d == t->n_options) {
        *rc = cli_bad_args(t, cmd, "%s: unknown option %s", cmd->name, a);
        return NULL;
    }
    if (!(cmd->opts & t->options[d].bit)) {
        *rc = cli_bad_args(t, cmd, "%s does not take %s", cmd->name, a);
        return NULL;
    }
    if (t->options[d].arg) {
        if (*i + 1 >= argc) {
            *rc = cli_bad_args(t, cmd, "%s needs a value (%s)", a, t->options[d].arg);
            return NULL;
        }
        *value = argv[++*i];
    }
    return &t->options[d];
}

static int cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* The queue pairs' options, which every tool serving a file through the
 * software controller takes alike: their rows of the option table, then
 * their check. */
#define CLI_PAIRS_DOCS(pairs_bit, depth_bit, iops_bit, pairs_default)                      \
    {"--pairs", "P", "queue pairs (default " pairs_default ")", pairs_bit},                \
        {"--depth", "D", "queue depth, a power of two 2..65536 (default 256)", depth_bit}, \
        {"--iops", "N", "cap the controller at N commands/s (default: no cap)", iops_bit}

/* Value v (its text a) of --pairs (1..max_pairs), --depth or --iops into
 * *pairs, *depth or *iops: 0, or 2 after a message. */
static int cli_pairs_value(const cli_tool *t, const cli_command *cmd, const char *name, const char *a, uint64_t v,
                           uint32_t max_pairs, uint32_t *pairs, uint32_t *depth, uint64_t *iops) {
    if (!strcmp(name, "--pairs")) {
        if (v < 1 || v > max_pairs) return cli_bad_args(t, cmd, "--pairs %s: want 1..%u", a, max_pairs);
        *pairs = (uint32_t)v;
    } else if (!strcmp(name, "--depth")) {
        if (v < 2 || v > 65536 || (v & (v - 1)) != 0)
            return cli_bad_args(t, cmd, "--depth %s: want a power of two, 2..65536", a);
        *depth = (uint32_t)v;
    } else {
        *iops = v;
    }
    return 0;
}

/* Can a file be created at `path`? Checked before any work, so that a run
 * does not generate or traverse anything only to fail writing the result. */
static int cli_check_writable(const cli_tool *t, const cli_command *cmd, const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    struct stat sb;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    if (stat(dir, &sb) != 0) return cli_bad_args(t, cmd, "%s: directory %s: %s", path, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return cli_bad_args(t, cmd, "%s: %s is not a directory", path, dir);
    if (access(dir, W_OK) != 0)
        return cli_bad_args(t, cmd, "%s: directory %s is not writable: %s", path, dir, strerror(errno));
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return cli_bad_args(t, cmd, "%s is a directory", path);
    return 0;
}

#endif /* GPUMEM_EXAMPLES_TOOL_CLI_H */
