/* SPDX-License-Identifier: MIT */
/* line.pml - the cache's line protocol with a prefetcher: acquire (hit,
 * the miss winner's fill, waiting on BUSY), release, eviction of a victim
 * nobody holds, the withdrawal of a fill that found no slot, and
 * gpumem_cache_prefetch's fill with no reference (count 0), which may also
 * give a claimed victim back (a line hinted for sooner use), exhausted by
 * Spin. `make spin` runs it.
 *
 * WHAT IS CHECKED
 *   - a line is never evicted while a thread holds it, and every hit and
 *     every fill returns the line's newest version (a holder reads what the
 *     last writer wrote);
 *   - no write is lost: at the end each line's newest version is in the
 *     backing, or in the slot marked dirty;
 *   - the books balance: no count below zero, and at the end no reference
 *     and no BUSY left on any line, the slot unlocked;
 *   - no deadlock: every thread finishes (a BUSY never cleared would leave
 *     a waiter blocked: an invalid end state).
 *
 * CORRESPONDENCE (gpumem_cache.h -> model; one Promela statement = one
 * atomic step)
 *   the line-state word (VALID | BUSY | DIRTY | count) -> valid[], busy[],
 *     dirty[], cnt[], changed together in one step per atomic
 *   gpumem__cache_acquire: fetch_add(count) (the reference and the look);
 *     hit: fetch_or(DIRTY) for a writer, then the slot's tag and data; not
 *     BUSY: fetch_or(BUSY), VALID meanwhile: fetch_and(~BUSY) and look
 *     again; BUSY: wait until it clears            -> Acquire()
 *   gpumem_cache_release: fetch_sub(count)          -> one step
 *   gpumem__cache_find_slot / gpumem__cache_sweep / gpumem__slot_claim:
 *     trylock the slot; empty: claimed; else gpumem__slot_take_line: a
 *     relaxed look (VALID, not BUSY, count 0), fetch_or(BUSY): BUSY before:
 *     unlock; a count: fetch_and(~BUSY), unlock (TAKE_HELD); else claimed.
 *     A prefetch (spare) may then find the victim hinted sooner: the claim
 *     undone as TAKE_HELD's (fetch_and(~BUSY), unlock). Up to SWEEPS tries
 *     for a demand miss, one for a prefetch      -> Fill()'s search
 *   gpumem__miss_step: EVICT/PLACED/WRITTEN (a dirty victim written back
 *     with the slot locked), EVICTED (keep only the count: VALID, BUSY,
 *     DIRTY cleared), TAKE (tag, policy fill, unlock), READ (I/O),
 *     PUBLISH (DIRTY for a writer, then fetch_xor(VALID|BUSY)), DONE;
 *     WITHDRAW: fetch_sub(BUSY + count)          -> Fill(): one step each
 *   gpumem_cache_prefetch: a relaxed look (VALID or BUSY: done);
 *     fetch_or(BUSY); BUSY before: done; VALID: fetch_and(~BUSY); else
 *     gpumem__cache_fill with count 0 and spare  -> Prefetch()
 * ABSTRACTED
 *   - memory order: sequential consistency (the code's acquire/release
 *     pairs are what the steps' order stands for);
 *   - one slot and two lines, so every fill of one evicts the other; the
 *     policy's choice is the only slot; the hint that makes a prefetch give
 *     a victim back is a free choice at each claim (any hint, any time);
 *   - the budget (one prefetcher, never over it), the host tier, the
 *     share, I/O errors, the statistics; a line's data is one version
 *     number, a write one step while the line is held;
 *   - a demand acquire that gets EAGAIN (every sweep failed) tries again;
 *   - ghosts: latest[] (the newest version of each line), held[] (threads
 *     holding each line).
 *
 * SEEDED BUGS (-DSEEDED_BUG=n; each must make pan report an error)
 *   1  the claim ignores the count its fetch_or(BUSY) returned (the
 *      re-check after the relaxed look): a line acquired between the look
 *      and the claim is evicted under its holder (assertion);
 *   2  the prefetch's fill takes a reference as an acquire's does (count
 *      1) and nobody releases it: its withdrawal takes a count it never
 *      added, or its line stays held and can never be evicted (assertion);
 *   3  the prefetch's "needed sooner" undo ends the claim as an eviction
 *      does (VALID and DIRTY cleared) instead of as TAKE_HELD's: a dirty
 *      line is dropped unwritten (lost write: assertion at the end).
 */

#ifndef SEEDED_BUG
#define SEEDED_BUG 0
#endif
#ifndef WRITES
#define WRITES 2       /* the writer's writes to line 0 */
#endif
#ifndef SWEEPS
#define SWEEPS 2       /* a demand miss's tries for the slot (full_sweeps) */
#endif
#define EMPTY 255
#define NPROC 3

byte valid[2], busy[2], dirty[2], cnt[2];
byte tag = EMPTY;      /* the slot's line */
bit slock;             /* the slot's lock */
byte sdata;            /* the slot's data: a version */
byte backing[2];       /* the data behind the cache */
byte latest[2];        /* ghost: each line's newest version */
byte held[2];          /* ghost: threads holding each line */
byte finished;

/* A search for the slot, then the miss's steps; res = 1 (OK) or 0 (EAGAIN). */
inline Fill(l, c, wr, pf, res) {
    claimed = 0;
    tries = 0;
    do
    :: claimed -> break
    :: !claimed && tries >= (pf -> 1 : SWEEPS) -> break
    :: !claimed && tries < (pf -> 1 : SWEEPS) ->
        tries++;
        atomic { if :: slock == 0 -> slock = 1; got = 1 :: else -> got = 0 fi }
        if
        :: got ->
            v = tag;
            if
            :: v == EMPTY -> claimed = 1
            :: else ->
                atomic { look = valid[v] && !busy[v] && cnt[v] == 0 }
                if
                :: look ->
                    atomic { pb = busy[v]; pc = cnt[v]; busy[v] = 1 }
                    if
                    :: pb -> slock = 0
                    :: !pb && pc > 0 && SEEDED_BUG != 1 -> busy[v] = 0; slock = 0
                    :: !pb && (pc == 0 || SEEDED_BUG == 1) ->
                        if
                        :: pf -> /* the victim hinted for sooner use: given back, or taken */
                            if
                            :: SEEDED_BUG != 3 -> busy[v] = 0; slock = 0
                            :: SEEDED_BUG == 3 -> atomic { valid[v] = 0; busy[v] = 0; dirty[v] = 0; tag = EMPTY };
                                                  slock = 0
                            :: claimed = 1
                            fi
                        :: !pf -> claimed = 1
                        fi
                    fi
                :: !look -> slock = 0
                fi
            fi
        :: !got -> skip
        fi
    od;
    if
    :: claimed ->
        v = tag;
        if
        :: v != EMPTY ->
            assert(held[v] == 0);                       /* no holder's line evicted */
            if :: dirty[v] -> backing[v] = sdata :: else -> skip fi; /* the write-back */
            atomic { valid[v] = 0; busy[v] = 0; dirty[v] = 0 }       /* EVICTED: the count kept */
        :: v == EMPTY -> skip
        fi;
        tag = l;                                        /* TAKE */
        slock = 0;
        sdata = backing[l];                             /* READ */
        atomic {                                        /* PUBLISH: the newest version */
            assert(sdata == latest[l]);
            if :: wr -> dirty[l] = 1 :: else -> skip fi; valid[l] = 1; busy[l] = 0
        };
        atomic {                                        /* DONE: the caller's data, if it holds the line */
            assert(c == 0 || (tag == l && sdata == latest[l]));
            held[l] = held[l] + c
        };
        res = 1
    :: !claimed ->
        atomic { assert(cnt[l] >= c); busy[l] = 0; cnt[l] = cnt[l] - c }   /* WITHDRAW */
        res = 0
    fi
}

/* Take a reference to line l (wr: to write it); res 1, or 0 for EAGAIN. */
inline Acquire(l, wr, res) {
    atomic { cnt[l]++; sv = valid[l]; sb = busy[l] }
    do
    :: sv && !sb ->                                     /* hit */
        if :: wr -> dirty[l] = 1 :: else -> skip fi;
        atomic { assert(tag == l && sdata == latest[l]); held[l]++ };
        res = 1;
        break
    :: !sb && !sv ->
        atomic { pb = busy[l]; pv = valid[l]; busy[l] = 1 }
        if
        :: pb -> (busy[l] == 0); atomic { sv = valid[l]; sb = busy[l] }
        :: !pb && pv -> atomic { busy[l] = 0; sv = valid[l]; sb = busy[l] }
        :: !pb && !pv -> Fill(l, 1, wr, 0, res); break
        fi
    :: sb -> (busy[l] == 0); atomic { sv = valid[l]; sb = busy[l] }
    od
}

inline Release(l) {
    atomic { assert(cnt[l] > 0 && held[l] > 0); cnt[l]--; held[l]-- }
}

/* gpumem_cache_prefetch of line l (its hint: the free choice in Fill). */
inline Prefetch(l) {
    atomic { sv = valid[l] || busy[l] }
    if
    :: sv -> skip
    :: !sv ->
        atomic { pb = busy[l]; pv = valid[l]; busy[l] = 1 }
        if
        :: pb -> skip
        :: !pb && pv -> busy[l] = 0
        :: !pb && !pv ->
            Fill(l, (SEEDED_BUG == 2 -> 1 : 0), 0, 1, res)
        fi
    fi
}

#define LOCALS byte v, tries, res; bit claimed, got, look, pb, pv, sv, sb; byte pc

proctype Writer() {
    LOCALS;
    byte n = 0;
    do
    :: n < WRITES ->
        Acquire(0, 1, res);
        if
        :: res ->
            atomic { assert(tag == 0); sdata = latest[0] + 1; latest[0]++ };
            Release(0);
            n++
        :: !res -> skip                                 /* EAGAIN: again */
        fi
    :: n >= WRITES -> break
    od;
    finished++
}

proctype Reader() {
    LOCALS;
    do
    :: Acquire(1, 0, res);
        if
        :: res -> Release(1); break
        :: !res -> skip
        fi
    od;
    finished++
}

proctype Prefetcher() {
    LOCALS;
    if
    :: Prefetch(1); Prefetch(0)
    :: Prefetch(0); Prefetch(1)
    fi;
    finished++
}

init {
    byte l;
    atomic {
        run Writer();
        run Reader();
        run Prefetcher()
    };
    (finished == NPROC);
    /* every write kept, the books balanced */
    for (l : 0 .. 1) {
        assert(cnt[l] == 0 && busy[l] == 0 && held[l] == 0);
        if
        :: tag == l && valid[l] && dirty[l] -> assert(sdata == latest[l])
        :: else -> assert(backing[l] == latest[l])
        fi
    }
    assert(slock == 0)
}
