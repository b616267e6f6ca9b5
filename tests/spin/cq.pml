/* SPDX-License-Identifier: MIT */
/* cq.pml - the completion queue: phase-bit harvest with per-position head
 * markers, the head-lock holder moving the head (and the SQ head from the
 * evidence of what it passes), and command-ID reuse (gpumem_nvme.h:
 * gpumem__cq_harvest, gpumem__cpl_take, gpumem__cq_move_head,
 * gpumem__cid_try_id, gpumem__cid_collect_done, gpumem__qp_id_wait,
 * gpumem__qp_cpl_wait), exhausted by Spin. `make spin` runs it.
 *
 * WHAT IS CHECKED
 *   - every completion is delivered once, to the command it answers: the
 *     owner finds its own command's dword 0 in its mailbox, and no
 *     completion is judged stray, stale or duplicate (the controller here
 *     is honest, so any drop is the protocol's fault);
 *   - the head never passes an unconsumed entry: each position it passes
 *     holds the completion delivered from that very virtual position;
 *   - the SQ head moves only over entries the controller has fetched;
 *   - a command ID is reused only after the head has passed its last
 *     completion: the controller, as gpumem_swctl's does, refuses a
 *     command whose ID it still has in flight, looking at the CQ doorbell
 *     again first;
 *   - the controller never overwrites a completion (it posts only with
 *     room behind the doorbell, and never sees the doorbell run ahead of
 *     what it posted);
 *   - no deadlock: every run ends with every request collected, the CQ
 *     and SQ heads past everything and the doorbell rung for it.
 *   Counters run modulo 2^W from START, a multiple of 2 * DEPTH, so the
 *   phase flips per lap and the configurations `make spin` runs cross the
 *   counters' wrap.
 *
 * CORRESPONDENCE (code -> model; one Promela statement = one atomic step)
 *   ID word (uint64: IN_USE, DONE, SUBMITTED, CLAIMED, ticket / CQ position)
 *                                                 -> cw[c]: the same bits and a 4-bit position
 *   gpumem__qp_id_wait: cid_take, else harvest, wait -> Req: take_id(); harvest(); WAIT
 *   gpumem__cid_try_id: load w; IN_USE: no; DONE: load cq_released,
 *     wrap_diff(released, pos) <= 0: no; CAS to IN_USE -> take_id: three steps per candidate
 *   gpumem__submit: ticket, store ID word IN_USE|SUBMITTED|ticket, enqueue
 *                                                 -> one step once the SQ has room (sq.pml models the SQ)
 *   gpumem__qp_cpl_wait: collect_done, harvest, collect_done, wait
 *   gpumem__cid_collect_done: load w; held and DONE: read the mailbox;
 *     CAS w -> w & ~IN_USE                        -> collect: three steps
 *   gpumem__cq_harvest: head = load cq_head; for i < depth - 1:
 *     load dw3; phase != want: break              -> one step
 *     load head_mark != 0: continue               -> one step
 *     CAS head_mark 0 -> 2: fail: continue        -> one step
 *     re-check: load cq_head (v - head >= depth), load dw3 (phase):
 *       else store head_mark 0, break             -> two loads, one store
 *     gpumem__cpl_take: load w; judge; CAS w | CLAIMED; read dw0 into the
 *       mailbox; store DONE | IN_USE | v          -> five steps
 *     store sq_next; store head_mark 1            -> two steps
 *   then gpumem__cq_move_head if it took any.
 *   gpumem__cq_move_head: lock (load, exchange); cur = cq_head, sq_head
 *     (written only under the lock: read in the lock's step); while n <
 *     depth - 1: load head_mark == 1 (with its sq_next, written before it);
 *     store sq_head = best; store cq_head; clear the marks; CQ doorbell;
 *     store cq_released; unlock; load the mark at the new head, loop if 1
 *                                                 -> one step each
 *   the controller (gpumem_target_fetch, gpumem__sw_accept, its CQ room
 *     check and posting: dword 0 first, dword 3 with the phase last)
 *                                                 -> Ctl; completes fetched commands in any order
 *                                                    (gpumem_swctl's `reorder`)
 * ABSTRACTED
 *   - memory order: sequential consistency (see sq.pml);
 *   - the SQ: a submission is one step, in ticket order, once fewer than
 *     depth - 1 entries are unfreed (sq.pml checks the SQ protocol); the
 *     head mover's turn increments and push are left out;
 *   - IDs carry no generation bits (the worst case: a pair with 65,536
 *     IDs has none), and the SQ-head plausibility checks of
 *     gpumem__cpl_judge are left out: with an honest controller they pass;
 *   - timeouts, orphans, PARKED and wake-ups, the budget word (the IDs are
 *     the budget here: NCID <= depth - 1, or 2 at depth 2), the warp's one
 *     poller, the quiet flag (reset.pml), the mailbox's status word;
 *   - waits: a waiting thread harvests, then blocks until some shared word
 *     has changed since its round began (changed[]): a round over unchanged
 *     words would do the same again, so only repeated looks are left out,
 *     and a wait nothing can end is an invalid end state;
 *   - candidates: every ID in turn from 0, not from the round-robin ticket.
 *
 * CONFIGURATIONS (tests/spin/run.sh): laps - depth 2, two IDs, 5 requests
 * from position 4 with positions modulo 8 (the phase flips each lap, the
 * counters wrap, each position is reused); batch - depth 4, three IDs, 3
 * requests (scans over several entries, heads moved over several, three
 * completions in any order).
 *
 * SEEDED BUGS (-DSEEDED_BUG=n; each must make pan report an error)
 *   1  the head mover passes an entry being harvested (head_mark != 0
 *      instead of == 1): the head passes an unconsumed entry;
 *   2  gpumem__cid_try_id reuses a DONE ID without looking at cq_released:
 *      the controller sees the ID again before the doorbell passed its
 *      completion;
 *   3  the harvester does not re-check the head after its claim: a thread
 *      whose head is a lap old claims an entry consumed and passed already.
 */

#ifndef DEPTH
#define DEPTH 2
#endif
#ifndef LOG2D
#define LOG2D 1
#endif
#ifndef NCID
#define NCID 2
#endif
#ifndef W
#define W 3            /* virtual positions modulo 2^W (the code's 2^32); at most 4 */
#endif
#ifndef START
#define START 4        /* a multiple of 2 * DEPTH */
#endif
#ifndef REQ0
#define REQ0 2         /* requests of thread 0 */
#endif
#ifndef REQ1
#define REQ1 2         /* requests of thread 1 */
#endif
#ifndef SEEDED_BUG
#define SEEDED_BUG 0
#endif

#define D DEPTH
#define MASK (D - 1)
#define WM ((1 << W) - 1)
#define VM(x) ((x) & WM)
#define HALF (1 << (W - 1))
#define DIFF(a, b) ((((a) - (b) + HALF) & WM) - HALF)   /* gpumem_wrap_diff_u32 */
#define PH(v) ((((v) >> LOG2D) & 1) ^ 1)                /* phase 1 on even laps */
#define TOTAL (REQ0 + REQ1)
#define END VM(START + TOTAL)

/* ID word bits */
#define IN_USE 128
#define DONE 64
#define SUB 32
#define CLAIMED 16
#define POS(w) ((w) & 15)

#define TOUCH changed[0] = 1; changed[1] = 1

/* ring memory: the CQ (dword 0: here the command's serial; dword 3: phase
 * in bit 0, CID above), the CQ head doorbell */
byte cq_dw0[D];
byte cq_dw3[D];
byte cq_db = 0;
/* client state */
byte cq_head = START;
byte cq_released = START;
byte head_lock = 0;
byte sq_head = START;
byte head_mark[D];
byte sq_next[D];
byte cw[NCID];
byte mail[NCID];
/* the SQ, abstract: tickets handed over, each entry's CID and serial */
byte tail = START;
byte sq_cid[D];
byte sq_ser[D];
/* the controller's own state */
byte ctl_fetched = START;   /* SQ entries fetched */
byte ctl_tail = START;      /* next CQ position to post */
byte ctl_head = START;      /* CQ head as it last read the doorbell */
byte ctl_state[NCID];       /* 0 free, 1 fetched, 2 completion posted, doorbell not past it */
byte ctl_pos[NCID];         /* where that completion was posted */
byte ctl_ser[NCID];         /* the fetched command's serial */
/* ghosts */
bit changed[2];           /* a shared word was written since the thread's round began */
byte done_at[D];          /* 128 | v: the completion at position v was delivered */
byte collected = 0;

/* The controller reads the CQ head doorbell: completions behind it are
 * consumed, their IDs free for reuse (gpumem_target_take_cq_doorbell). */
inline take_cq_db() {
  atomic {
    vh = VM(ctl_tail - ((ctl_tail - cq_db) & MASK));
    assert(DIFF(vh, ctl_head) >= 0 && DIFF(ctl_tail, vh) >= 0);   /* never backwards, never past what was posted */
    ctl_head = vh;
    i = 0;
    do
    :: i < NCID ->
       if
       :: ctl_state[i] == 2 && DIFF(vh, ctl_pos[i]) > 0 -> ctl_state[i] = 0
       :: else
       fi;
       i++
    :: else -> break
    od;
    i = 0
  }
}

#define ROOM (VM(ctl_tail - VM(ctl_tail - ((ctl_tail - cq_db) & MASK))) < D - 1)
#if NCID > 2
#define FETCHED (ctl_state[0] == 1 || ctl_state[1] == 1 || ctl_state[2] == 1)
#else
#define FETCHED (ctl_state[0] == 1 || ctl_state[1] == 1)
#endif

proctype Ctl() {
  byte e, c, vh, i;
  do
  :: atomic {   /* gpumem_target_fetch */
       ctl_fetched != tail ->
       e = ctl_fetched & MASK;
       c = sq_cid[e];
       ctl_ser[c] = sq_ser[e];
       ctl_fetched = VM(ctl_fetched + 1)
     };
     /* gpumem__sw_accept: an ID still in flight is a violation, once the
      * CQ doorbell has been looked at again */
     if
     :: ctl_state[c] == 2 -> take_cq_db()
     :: else
     fi;
     atomic { assert(ctl_state[c] == 0); ctl_state[c] = 1; c = 0; e = 0 }
  :: /* complete a fetched command, any of them, once the doorbell shows room */
     atomic {
       ROOM && FETCHED ->
       if
       :: ctl_state[0] == 1 -> c = 0
       :: ctl_state[1] == 1 -> c = 1
#if NCID > 2
       :: ctl_state[2] == 1 -> c = 2
#endif
       fi
     };
     take_cq_db();
     atomic { cq_dw0[ctl_tail & MASK] = ctl_ser[c]; TOUCH };
     atomic {
       cq_dw3[ctl_tail & MASK] = PH(ctl_tail) + 2 * c; TOUCH;
       ctl_state[c] = 2; ctl_pos[c] = ctl_tail; ctl_tail = VM(ctl_tail + 1); ctl_ser[c] = 0; c = 0
     }
  :: ctl_tail == END -> break
  od
}

/* gpumem__cq_move_head */
inline move_head() {
  do
  :: atomic {
       if
       :: head_lock != 0 -> break
       :: else -> head_lock = 1; TOUCH; cur = cq_head; best = sq_head; sqh = best; n = 0
       fi
     };
     do
     :: atomic {
          if
#if SEEDED_BUG == 1
          :: n < D - 1 && head_mark[VM(cur + n) & MASK] != 0 ->
#else
          :: n < D - 1 && head_mark[VM(cur + n) & MASK] == 1 ->
#endif
             assert(done_at[VM(cur + n) & MASK] == 128 + VM(cur + n));   /* consumed: delivered from here */
             if
             :: DIFF(sq_next[VM(cur + n) & MASK], best) > 0 -> best = sq_next[VM(cur + n) & MASK]
             :: else
             fi;
             n++
          :: else -> break
          fi
        }
     od;
     if
     :: n > 0 ->
        atomic {
          if
          :: best != sqh -> assert(DIFF(ctl_fetched, best) >= 0); sq_head = best; TOUCH
          :: else
          fi
        };
        atomic { cq_head = VM(cur + n); TOUCH };
        k = 0;
        do
        :: atomic { k < n -> head_mark[VM(cur + k) & MASK] = 0; done_at[VM(cur + k) & MASK] = 0; TOUCH; k++ }
        :: k == n -> break
        od;
        atomic { cq_db = VM(cur + n) & MASK; TOUCH };
        atomic { cq_released = VM(cur + n); TOUCH }
     :: else
     fi;
     atomic { head_lock = 0; TOUCH; k = 0; best = 0; sqh = 0 };
     atomic {
       if
       :: head_mark[VM(cur + n) & MASK] != 1 -> cur = 0; n = 0; break
       :: else -> cur = 0; n = 0
       fi
     }
  od
}

/* gpumem__cq_harvest (with gpumem__cpl_take inlined) */
inline harvest() {
  atomic { head = cq_head; i = 0; got = 0 };
  do
  :: i < D - 1 ->
     v = VM(head + i);
     if
     :: (cq_dw3[v & MASK] & 1) != PH(v) -> break    /* reached the tail */
     :: else
     fi;
     if
     :: head_mark[v & MASK] != 0 -> skip            /* another harvester's, or consumed */
     :: else ->
        atomic {   /* the claim, 0 -> 2 */
          if
          :: head_mark[v & MASK] == 0 -> head_mark[v & MASK] = 2; TOUCH; mine = 1
          :: else -> mine = 0
          fi
        };
        if
        :: mine ->
#if SEEDED_BUG != 3
           if   /* the head may have passed v meanwhile: un-claim */
           :: VM(v - cq_head) >= D -> atomic { head_mark[v & MASK] = 0; TOUCH; mine = 0 }; break
           :: else
           fi;
#endif
           atomic {
             if
             :: (cq_dw3[v & MASK] & 1) != PH(v) -> head_mark[v & MASK] = 0; TOUCH; mine = 0; break
             :: else -> wire = cq_dw3[v & MASK] / 2
             fi
           };
           /* gpumem__cpl_take */
           w = cw[wire];
           do
           :: atomic {
                /* gpumem__cpl_judge's ID checks: none fails with an honest controller */
                assert((w & (IN_USE | SUB | CLAIMED | DONE)) == (IN_USE | SUB));
                if
                :: cw[wire] == w -> cw[wire] = w | CLAIMED; TOUCH; break
                :: else -> w = cw[wire]
                fi
              }
           od;
           atomic { m = cq_dw0[v & MASK] };
           atomic { mail[wire] = m; TOUCH };
           atomic { cw[wire] = IN_USE | DONE | (v & 15); TOUCH; done_at[v & MASK] = 128 + v };
           atomic { sq_next[v & MASK] = VM(POS(w) + 1); TOUCH; m = 0 };
           atomic { head_mark[v & MASK] = 1; TOUCH; got = 1; w = 0; wire = 0; mine = 0 }
        :: else
        fi
     fi;
     i++
  :: else -> break
  od;
  atomic { v = 0; i = 0; head = 0; mine = 0 };
  if
  :: got -> got = 0; move_head()
  :: else
  fi
}

/* gpumem__cid_try_id over every candidate */
inline take_id() {
  c = 0;
  do
  :: c < NCID ->
     w = cw[c];
     ok = !(w & IN_USE);
#if SEEDED_BUG != 2
     if
     :: ok && (w & DONE) ->   /* reusable once the released head has passed its completion */
        if
        :: DIFF(cq_released, POS(w)) <= 0 -> ok = 0
        :: else
        fi
     :: else
     fi;
#endif
     if
     :: ok ->
        atomic {
          if
          :: cw[c] == w -> cw[c] = IN_USE; TOUCH; have = 1
          :: else
          fi
        }
     :: else
     fi;
     if
     :: have -> break
     :: else -> c++
     fi
  :: else -> break
  od;
  atomic { w = 0; ok = 0 }
}

/* gpumem__cid_collect_done for the thread's own ID c */
inline collect() {
  w = cw[c];
  if
  :: (w & (IN_USE | DONE)) == (IN_USE | DONE) ->
     atomic { m = mail[c] };
     assert(m == serial);       /* its own command's completion */
     atomic {
       assert(cw[c] == w);      /* nobody else changes a held word with a result */
       cw[c] = w & ~IN_USE; TOUCH; have = 0; m = 0; collected++
     }
  :: else
  fi;
  w = 0
}

proctype Req(byte me; byte nreq) {
  byte serial, c, w, have, m, head, i, v, got, wire, cur, best, sqh, n, k;
  bit mine, ok;
  do
  :: nreq > 0 ->
     atomic { serial = me * 8 + nreq; have = 0 };
     /* gpumem__qp_id_wait */
     do
     :: changed[me] = 0;
        take_id();
        if
        :: have -> break
        :: else
        fi;
        harvest();
        changed[me] == 1
     od;
     /* gpumem__submit, the SQ abstract */
     do
     :: atomic {
          VM(tail - sq_head) < D - 1 ->
          assert(VM(tail - ctl_fetched) < D);   /* the entry it overwrites was fetched */
          cw[c] = IN_USE | SUB | (tail & 15); TOUCH;
          sq_cid[tail & MASK] = c; sq_ser[tail & MASK] = serial;
          tail = VM(tail + 1); break
        }
     :: atomic { VM(tail - sq_head) >= D - 1 -> changed[me] = 0 };
        harvest();
        changed[me] == 1
     od;
     /* gpumem__qp_cpl_wait */
     do
     :: changed[me] = 0;
        collect();
        if
        :: !have -> break
        :: else
        fi;
        harvest();
        collect();
        if
        :: !have -> break
        :: else
        fi;
        changed[me] == 1
     od;
     atomic { nreq--; c = 0; serial = 0 }
  :: nreq == 0 -> break
  od
}

init {
  atomic {
    run Ctl();
    run Req(0, REQ0);
    run Req(1, REQ1)
  };
  _nr_pr == 1;
  assert(collected == TOTAL && cq_head == END && cq_released == END && sq_head == END &&
         ctl_fetched == END && head_lock == 0 && (cq_db == (END & MASK)))
}
