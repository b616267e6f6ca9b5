#!/bin/sh
# SPDX-License-Identifier: MIT
# readme.sh PREFIX TMP DIST (from tests/consumer/check.sh, make install-test):
# build README.md's "Compiling against it" lines as a user pastes them, each
# from a project of its own outside the tree, with README's quickstart
# program (examples/hello.c) as hello.c, and run what they build:
#   - the pkg-config command line, with PKG_CONFIG_PATH set as README says;
#   - the ```cmake block once for each of its four ways: the lines above
#     "# gpumem, any one of the four ways:", one way's lines, and the lines
#     after the last way. Only README's <...> placeholders are filled in:
#     <prefix> (the install prefix), <repository URL> (a bare local clone of
#     this repository carrying the tree's files, tagged as README's GIT_TAG
#     says: the test makes its own tag, so a clone without tags works), <URL of
#     gpumem-V.tar.gz> (make dist's tarball, DIST). The vendored copy is made
#     by README's own `mkdir -p third_party && tar ...` line.
# A README line that no longer builds, a placeholder this script does not
# know, or a block that lost one of its ways fails with what and where.
set -eu
prefix=$1
tmp=$2
dist=$3
repo=$(pwd)
log=$tmp/readme.log
fail() { echo "install-test: README: FAILED: $*" >&2; echo "  (log: $log, files: $tmp)" >&2; exit 1; }
quiet() { "$@" >>"$log" 2>&1 || { tail -n 30 "$log" >&2; fail "$*"; }; }
ran_hello() { # the program $1 prints what hello.c writes
    out=$("$1") || fail "$1 exited non-zero"
    case $out in *"hello from block 7"*) ;; *) fail "$1 printed: $out" ;; esac
}
# readme_line PATTERN: README's one indented (code) line containing PATTERN, as written.
readme_line() {
    line=$(grep -F -- "$1" README.md | grep '^    ' | sed 's/^    //') || true
    [ -n "$line" ] || fail "README.md has no code line with '$1'"
    [ "$(printf '%s\n' "$line" | wc -l)" = 1 ] || fail "README.md has several code lines with '$1'"
    printf '%s\n' "$line"
}

# 1. pkg-config: README's line, in a project of its own, with README's export.
pc_line=$(readme_line '$(pkg-config --cflags --libs gpumem)')
export_line=$(grep -o 'export PKG_CONFIG_PATH=<prefix>/share/pkgconfig' README.md | head -n 1)
[ -n "$export_line" ] || fail "README.md no longer says how to point pkg-config at a prefix (export PKG_CONFIG_PATH=...)"
mkdir -p "$tmp/readme-pc"
cp examples/hello.c "$tmp/readme-pc/hello.c"
(
    cd "$tmp/readme-pc"
    eval "$(printf '%s\n' "$export_line" | sed "s|<prefix>|$prefix|")"
    eval "$pc_line" >>"$log" 2>&1
) || { tail -n 20 "$log" >&2; fail "README's pkg-config line: $pc_line"; }
ran_hello "$tmp/readme-pc/hello"
echo "install-test: README's pkg-config line built and ran: $pc_line"

# 2. The CMake block, split into its common lines and its four ways.
block=$tmp/readme-cmake.txt
sed -n '/^```cmake$/,/^```$/p' README.md | sed '1d;$d' > "$block"
[ -s "$block" ] || fail "README.md has no \`\`\`cmake block"
ways=$(grep -c '^# ([0-9])' "$block" || true)
[ "$ways" = 4 ] || fail "README's cmake block has $ways ways marked '# (N)', want 4"
grep -q '^# gpumem, any one of the four ways:' "$block" || fail "README's cmake block lost its '# gpumem, any one of the four ways:' line"
head_lines=$(sed '/^# gpumem, any one of the four ways:/,$d' "$block")
tail_lines=$(awk 'f && /^$/ {t = 1; next} t {print} /^# \(4\)/ {f = 1}' "$block")
[ -n "$tail_lines" ] || fail "README's cmake block has nothing after its four ways (target_link_libraries)"
way_lines() { awk -v n="# ($1)" 'index($0, n) == 1 {w = 1; print; next} /^# \([0-9]\)/ || /^$/ {w = 0} w {print}' "$block"; }

# The tag README pins, made on a local clone that carries the tree's files
# (make dist's, over the last commit), so the clone is what the tree is.
tag=$(sed -n 's/.*GIT_TAG \([^ )]*\).*/\1/p' "$block" | head -n 1)
[ -n "$tag" ] || fail "README's cmake block has no GIT_TAG"
origin=$tmp/origin
quiet git clone -q "$repo" "$origin"
tar -xzf "$dist" -C "$tmp"
dist_dir=$tmp/$(basename "$dist" .tar.gz)
cp -r "$dist_dir"/. "$origin"/
quiet git -C "$origin" add -A
git -C "$origin" -c user.name=install-test -c user.email=install-test@localhost commit -qm "the tree's files" \
    >>"$log" 2>&1 || true # nothing to commit: the tree is the last commit
git -C "$origin" tag -d "$tag" >>"$log" 2>&1 || true
quiet git -C "$origin" -c user.name=install-test -c user.email=install-test@localhost tag -a "$tag" -m "install-test"
# What FetchContent is pointed at is a bare clone, as a remote is: it serves
# git, not a tree of files, so a URL (not GIT_REPOSITORY) line fails here as
# it would against a real remote.
quiet git clone -q --bare "$origin" "$origin.git"

dist_name=$(basename "$dist")
for n in 1 2 3 4; do
    app=$tmp/readme-cmake-$n
    mkdir -p "$app"
    cp examples/hello.c "$app/hello.c"
    { printf '%s\n' "$head_lines"; way_lines $n; echo; printf '%s\n' "$tail_lines"; } |
        sed -e "s|<repository URL>|file://$origin.git|g" -e "s|<URL of $dist_name>|file://$dist|g" > "$app/CMakeLists.txt"
    left=$(grep -v '^ *#' "$app/CMakeLists.txt" | sed 's/#.*//' | grep -o '<[^>]*>' || true)
    [ -z "$left" ] || fail "README's cmake way ($n) has a placeholder this test does not fill: $left"
    configure_args=
    case $n in
    1) configure_args="-DCMAKE_PREFIX_PATH=$prefix" ;;
    2) cp "$dist" "$app/" # README's own vendoring line, from the project's top
       vendor=$(readme_line 'mkdir -p third_party && tar -xzf')
       (cd "$app" && eval "$vendor") >>"$log" 2>&1 || { tail -n 20 "$log" >&2; fail "README's vendoring line: $vendor"; } ;;
    esac
    # shellcheck disable=SC2086 # configure_args is empty or one word
    quiet cmake -S "$app" -B "$app/build" $configure_args
    quiet cmake --build "$app/build"
    ran_hello "$app/build/app"
    echo "install-test: README's CMake way ($n) built and ran: $(way_lines $n | grep -v '^#' | tr '\n' ' ')"
done
