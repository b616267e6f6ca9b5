#!/usr/bin/env python3
"""Generate the NULL-argument table of every public function (issue 30).

    tools/null_table.py OUT.c HEADER...

Reads each header's public function declarations (gpumem_<module>_<verb>,
not gpumem__ internals; prototypes and inline definitions alike, at the
start of a line) and writes a Criterion test source with one test per
function: every pointer argument NULL, every other argument zero. The call
must return (no crash, no hang: Criterion's timeout), and a function that
returns gpumem_status and takes a pointer must not return GPUMEM_OK. A
public function the table cannot call is named in SKIP with the reason;
the script fails (exit 2) on a declaration it cannot read, and the
generated test checks that the table holds every function the headers
declare, so a new public function cannot be missed.
"""
import re
import sys

# Functions the table does not call, and why. Every entry must still be
# declared (a stale entry fails the generation).
SKIP = {
    # none so far
}

DECL = re.compile(r'^(?:GPUMEM_API\s+|static\s+inline\s+|GPUMEM_HD\s+)?'
                  r'((?:const\s+)?[A-Za-z_][\w]*(?:\s+[A-Za-z_]\w*)*[\s\*]+)'
                  r'(gpumem_(?!_)[a-z0-9_]+)\s*\(')


def split_top(params):
    """The parameters, split at commas outside parentheses."""
    parts, depth, cur = [], 0, ''
    for ch in params:
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        depth += {'(': 1, ')': -1}.get(ch, 0)
        cur += ch
    return parts + [cur]


def declarations(path):
    """(name, return type, [param types], path:line) of each public function."""
    text = open(path).read()
    lines = text.split('\n')
    out = []
    conds = []  # per #if around line i: the guard its rows need ('' for none we track)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('#if') or line.startswith('#elif'):
            guard = ('defined(__CUDACC__)' if '__CUDACC__' in line and '!defined(__CUDACC__)' not in line
                     else 'defined(GPUMEM_HOST_WARP)' if 'defined(GPUMEM_HOST_WARP)' in line else '')
            if line.startswith('#if'):
                conds.append(guard)
            elif conds:
                conds[-1] = guard
        elif line.startswith('#else'):
            if conds:
                conds[-1] = ''
        elif line.startswith('#endif'):
            if conds:
                conds.pop()
        m = DECL.match(line)
        if not m or line.startswith('#') or 'typedef' in line or m.group(1).strip() in ('return', 'else'):
            i += 1
            continue
        ret, name = m.group(1).strip(), m.group(2)
        # the parameter list, possibly over several lines
        j, buf = i, line[m.end():]
        while buf.count('(') + 1 > buf.count(')'):
            j += 1
            if j >= len(lines):
                sys.exit('%s:%d: %s: unterminated parameter list' % (path, i + 1, name))
            buf += ' ' + lines[j].strip()
        depth, k = 1, 0
        while depth:
            depth += {'(': 1, ')': -1}.get(buf[k], 0)
            k += 1
        params, after = buf[:k - 1].strip(), buf[k:].strip()
        if not (after.startswith('{') or after.startswith(';')):
            i = j + 1
            continue  # a call or a macro use, not a declaration
        types = []
        if params not in ('', 'void'):
            for p in split_top(params):
                p = p.strip()
                if p == '...':
                    types = None
                    break
                if '(' in p:
                    types.append('* (function pointer)')
                    continue
                if p.endswith('*'):
                    types.append(p)  # unnamed pointer parameter
                    continue
                pm = re.match(r'^(.*?)([A-Za-z_]\w*)\s*$', p)
                if not pm or not pm.group(1).strip():
                    sys.exit('%s:%d: %s: cannot read parameter "%s"' % (path, i + 1, name, p))
                types.append(pm.group(1).strip())
        out.append((name, ret, types, '%s:%d' % (path, i + 1), ' && '.join(c for c in conds if c)))
        i = j + 1
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: tools/null_table.py OUT.c HEADER...')
    outp, headers = sys.argv[1], sys.argv[2:]
    funcs = {}
    for h in headers:
        for name, ret, types, where, cuda in declarations(h):
            if name not in funcs or (funcs[name][1] is None and types is not None):
                funcs[name] = (ret, types, where, cuda)
    for name in SKIP:
        if name not in funcs:
            print('null_table: SKIP names %s, which no header declares' % name, file=sys.stderr)
            sys.exit(2)
    rows, skipped = [], []
    for name in sorted(funcs):
        ret, types, where, cuda = funcs[name]
        if name in SKIP:
            skipped.append((name, SKIP[name]))
            continue
        if types is None:
            print('null_table: %s (%s): a parameter the table cannot pass (...); '
                  'add it to SKIP with the reason' % (name, where), file=sys.stderr)
            sys.exit(2)
        args = ['NULL' if '*' in t else '*(const %s *)(const void *)null_table_zero' % t for t in types]
        call = '%s(%s)' % (name, ', '.join(args))
        has_ptr = any('*' in t for t in types)
        if ret == 'gpumem_status' and has_ptr:
            body = ('    gpumem_status st = %s;\n'
                    '    cr_assert_neq(st, GPUMEM_OK, "%s with NULL pointers must return a status, not OK");\n'
                    % (call, name))
        elif ret == 'void':
            body = '    %s;\n' % call
        else:
            body = '    (void)%s;\n' % call
        row = '/* %s */\nTest(null_table, %s) {\n%s}\n' % (where, name, body)
        if cuda:  # declared only under this guard (nvcc, the host-warp test hook): so is its row
            row = '#if %s\n%s#endif\n' % (cuda, row)
        rows.append(row)
    with open(outp, 'w') as f:
        f.write('/* Generated by tools/null_table.py from %s: do not edit.\n'
                ' * Every public function with NULL pointers and zero values (issue 30). */\n'
                % ' '.join(headers))
        f.write('#define _POSIX_C_SOURCE 200809L\n#define GPUMEM_IMPLEMENTATION\n'
                '#include "log_capture.h"\n#include <criterion/criterion.h>\n#include <stdlib.h>\n\n')
        for h in headers:
            f.write('#include "%s"\n' % h)
        f.write('\nstatic const _Alignas(64) unsigned char null_table_zero[4096];\n\n'
                'TestSuite(null_table, .timeout = 30);\n\n')
        f.write('/* %d public functions declared, %d in the table, %d skipped: */\n' %
                (len(funcs), len(rows), len(skipped)))
        for name, why in skipped:
            f.write('/*   %s: %s */\n' % (name, why))
        f.write('Test(null_table, covers_every_public_function) {\n'
                '    cr_assert_eq(%d + %d, %d, "every declared public function has a row or a reason");\n}\n\n'
                % (len(rows), len(skipped), len(funcs)))
        f.write('\n'.join(rows))
    print('null_table: %d public functions, %d rows, %d skipped -> %s' % (len(funcs), len(rows), len(skipped), outp))


main()
