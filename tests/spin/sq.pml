/* SPDX-License-Identifier: MIT */
/* sq.pml - the submission queue's position/turn protocol with tail markers
 * (gpumem_nvme.h: gpumem__submit's ticket, gpumem__sq_enqueue,
 * gpumem__sq_turn_ok, gpumem__sq_push, gpumem__sq_move_tail, and the SQ part
 * of gpumem__cq_move_head), exhausted by Spin. `make spin` runs it
 * (tests/spin/run.sh; docs/models.md says what each model covers).
 *
 * WHAT IS CHECKED
 *   - never overfills: no submitter writes an SQ entry the controller has
 *     not read yet, and the tail never runs more than depth - 1 ahead of
 *     the head (assertions at the entry write and at the tail store);
 *   - no command lost or duplicated, and in ticket order: the controller,
 *     fetching in order up to the doorbell, finds at each position exactly
 *     the ticket it expects, written and not yet read;
 *   - a tail mark found by the tail mover belongs to ticket cur + n (the
 *     claim in gpumem__sq_move_tail's comment);
 *   - the tail lock excludes (one mover at a time), and each doorbell write
 *     moves the doorbell forward (once per batch, never an empty batch);
 *   - no stranded entry and no deadlock: every run ends with every ticket
 *     handed over, fetched and freed (an end-state assertion; a wait that
 *     can never end is an invalid end state, which pan reports);
 *   - past the wrap: counters run modulo 2^W from START (the tests start
 *     64 laps below 2^32), and turns compare modulo 2^(W + 1 - log2 DEPTH):
 *     the model's 2^32 is 2^W.
 *
 * CORRESPONDENCE (code -> model; one Promela statement is one atomic step)
 *   gpumem__submit: ticket = fetch_add(&qp->ticket)  -> Sub: atomic { t = ticket; ticket++ }
 *   gpumem__sq_enqueue: wait for gpumem__sq_turn_ok, ((turn - 2 * lap) &
 *     turn_mask) == 0, acquire                       -> TURN_OK(t), a blocking guard
 *   the command into qp->sq[pos]                     -> sq[pos] = t (one step: nobody reads
 *                                                       it before the mark and the doorbell)
 *   store tail_mark = 1 (seq_cst)                    -> mark[pos] = 1
 *   gpumem__sq_push, each round:
 *     tail = load (seq_cst)                          -> tl = tail
 *     load the mark at the tail == 0: return         -> one step
 *     tail - load sq_head >= depth - 1: return       -> one step
 *     load tail_lock != 0, exchange(tail_lock, 1) != 0: return
 *                                                    -> one step: the exchange (the look before
 *                                                       it only saves a write: the exchange of a
 *                                                       held lock changes nothing)
 *     gpumem__sq_move_tail, store tail_lock = 0, round again
 *   gpumem__sq_move_tail:
 *     cur = load tail                                -> in the lock's step (only the holder
 *                                                       writes tail)
 *     head = load sq_head (acquire)                  -> one step
 *     while cur + n - head < depth - 1: load the mark (acquire), 0: stop;
 *       store mark = 0; fetch_add turn (increment #1)
 *                                                    -> one step per entry: nobody else writes
 *                                                       the mark or the turn of a marked entry
 *     store tail = cur + n (seq_cst); doorbell write of (cur + n) & mask
 *                                                    -> one step, with the controller taking the
 *                                                       doorbell and fetching up to it
 *   the controller (gpumem_target_take_sq_doorbell, gpumem_target_fetch:
 *     in order up to the doorbell)                   -> at the doorbell write: a controller may
 *                                                       fetch at once, and a later fetch is only
 *                                                       a head mover freeing less (below)
 *   gpumem__cq_move_head, its SQ part (under the head lock): best = the most
 *     the passed completions prove (a fetched ticket + 1, fetching in
 *     order); fetch_add turn over sq_head .. best - 1 (increment #2); store
 *     sq_head = best (seq_cst); then gpumem__sq_push  -> Dev: best anywhere in (sq_head,
 *                                                       fetched]; the increments one step (only
 *                                                       the waiting submitters read them, each its
 *                                                       own), the store one, then sq_push
 * ABSTRACTED
 *   - memory order: Spin interleaves steps under sequential consistency;
 *     the handshake of gpumem__sq_push (seq_cst stores, then loads) asks
 *     for exactly that, the acquire/release pairs are not checked;
 *   - the CQ: completions, harvest and head lock are one process (Dev) that
 *     frees any prefix of the fetched entries, as completions proving them
 *     would (cq.pml models the CQ); the turn wait's harvest, parking and
 *     wake-ups are left out (a wait is a blocking guard, which only drops
 *     repeated looks); two submitter threads share NTOTAL tickets;
 *   - the command is its ticket; the command-ID budget is left out (it
 *     only keeps more than depth - 1 commands from waiting here); so is
 *     the quiet flag of a reset (reset.pml);
 *   - START need only be a multiple of DEPTH for the SQ (each position's
 *     first ticket is START + p, of lap START / DEPTH: gpumem__qp_restart);
 *     the pair asks 2 * DEPTH for its CQ's phase.
 *
 * SEEDED BUGS (-DSEEDED_BUG=n; each must make pan report an error)
 *   1  the turn check ignores the lap (waits only for an even turn): the
 *      next lap overwrites an entry the controller has not read (assertion);
 *   2  BaM's turn check, turn == 2 * lap as plain numbers: at the ticket
 *      wrap the turn never matches (invalid end state: a submitter waits
 *      for ever);
 *   3  the tail-lock holder does not look at the tail again after
 *      unlocking (gpumem__sq_push returns after one move): an entry marked
 *      while the lock was held is stranded (invalid end state).
 *
 * CONFIGURATIONS (tests/spin/run.sh): batch - depth 4, 4 tickets (batches,
 * the full queue's handshake); wrap - depth 2, 5 tickets from 4 with
 * counters modulo 8 (laps, reuse of each position, the wrap of tickets and
 * turns).
 */

#ifndef DEPTH
#define DEPTH 4
#endif
#ifndef LOG2D
#define LOG2D 2
#endif
#ifndef W
#define W 3          /* virtual counters modulo 2^W (the code's 2^32) */
#endif
#ifndef START
#define START 0      /* the first ticket: a multiple of DEPTH */
#endif
#ifndef NTOTAL
#define NTOTAL 4     /* tickets in all, shared by the two submitter threads */
#endif
#ifndef SEEDED_BUG
#define SEEDED_BUG 0
#endif

#define D DEPTH
#define MASK (D - 1)
#define WM ((1 << W) - 1)
#define VM(x) ((x) & WM)
#define TM ((1 << (W + 1 - LOG2D)) - 1)     /* qp->turn_mask */
#define END VM(START + NTOTAL)

#if SEEDED_BUG == 1
#define TURN_OK(t) ((turn[(t) & MASK] & 1) == 0)
#elif SEEDED_BUG == 2
#define TURN_OK(t) (turn[(t) & MASK] == 2 * ((t) >> LOG2D))
#else
#define TURN_OK(t) (((turn[(t) & MASK] - 2 * ((t) >> LOG2D)) & TM) == 0)
#endif

byte ticket = START;       /* qp->ticket */
byte tail = START;         /* qp->tail */
byte tail_lock = 0;        /* qp->tail_lock */
byte sq_head = START;      /* qp->sq_head */
byte turn[D];              /* slots[p].turn: a 32-bit word in the code, 8 bits here (masked on use) */
bit mark[D];               /* slots[p].tail_mark */
byte doorbell = 0;         /* *qp->sq_doorbell: a position */
byte sq[D];                /* qp->sq[p]: the ticket of the command written there */

/* ghosts: what the controller has fetched, entries written and unread,
 * movers inside the tail lock, the tail as last rung */
byte fetched = START;
bit pending[D];
byte in_tail = 0;
byte rung = START;

/* gpumem__sq_move_tail, entered holding the lock with cur = tail read in
 * the lock's step (only the holder writes tail); ends with the unlock. */
inline move_tail() {
  atomic { head = sq_head; n = 0 };
  do
  :: atomic {
       if
       :: VM(cur + n - head) < D - 1 && mark[VM(cur + n) & MASK] != 0 ->
          assert(sq[VM(cur + n) & MASK] == VM(cur + n) && pending[VM(cur + n) & MASK]);
          mark[VM(cur + n) & MASK] = 0;
          turn[VM(cur + n) & MASK] = (turn[VM(cur + n) & MASK] + 1) & 255;
          n++
       :: else -> break
       fi
     }
  od;
  atomic {
    if
    :: n > 0 ->
       assert(VM(cur + n - sq_head) <= D - 1);
       tail = VM(cur + n);
       assert(VM(cur + n) != rung); rung = VM(cur + n); doorbell = VM(cur + n) & MASK;
       /* The controller takes the doorbell and fetches up to it, in order. */
       do
       :: fetched != rung ->
          assert(pending[fetched & MASK] && sq[fetched & MASK] == fetched);
          pending[fetched & MASK] = 0;
          fetched = VM(fetched + 1)
       :: else -> break
       od
    :: else
    fi
  };
  atomic { in_tail = 0; tail_lock = 0 }
}

/* gpumem__sq_push */
inline sq_push() {
  do
  :: tl = tail;
     if
     :: mark[tl & MASK] == 0 -> break
     :: else
     fi;
     if
     :: VM(tl - sq_head) >= D - 1 -> break
     :: else
     fi;
     atomic {
       if
       :: tail_lock != 0 -> break
       :: else -> tail_lock = 1; assert(in_tail == 0); in_tail = 1; cur = tail
       fi
     };
     move_tail();
#if SEEDED_BUG == 3
     break
#endif
  od
}

/* A submitting thread: gpumem__submit's ticket, then gpumem__sq_enqueue. */
proctype Sub(byte subs) {
  byte t, cur, head, n, tl;
  do
  :: atomic { subs > 0 -> t = ticket; ticket = VM(ticket + 1); subs-- };
     TURN_OK(t);
     atomic { assert(!pending[t & MASK]); sq[t & MASK] = t; pending[t & MASK] = 1 };
     mark[t & MASK] = 1;
     sq_push();
     atomic { t = 0; cur = 0; head = 0; n = 0; tl = 0 }
  :: subs == 0 -> break
  od
}

/* The device side: the controller fetches in order up to the doorbell
 * (fetched); the head mover's SQ part frees what completions prove
 * fetched, then pushes. Only this process writes fetched and sq_head. */
proctype Dev() {
  byte best, k, cur, head, n, tl;
  do
  :: atomic { sq_head != fetched -> best = VM(sq_head + 1); k = sq_head };
     do
     :: best != fetched -> best = VM(best + 1)
     :: break
     od;
     atomic {
       do
       :: k != best -> turn[k & MASK] = (turn[k & MASK] + 1) & 255; k = VM(k + 1)
       :: else -> break
       od
     };
     sq_head = best;
     sq_push();
     atomic { best = 0; k = 0; cur = 0; head = 0; n = 0; tl = 0 }
  :: sq_head == END -> break
  od
}

init {
  byte p;
  atomic {
    p = 0;
    do
    :: p < D -> turn[p] = (START >> LOG2D) * 2; p++   /* gpumem__qp_restart */
    :: else -> break
    od;
    run Sub(NTOTAL - NTOTAL / 2);
    run Sub(NTOTAL / 2);
    run Dev()
  };
  _nr_pr == 1;
  assert(ticket == END && tail == END && fetched == END && sq_head == END && tail_lock == 0)
}
