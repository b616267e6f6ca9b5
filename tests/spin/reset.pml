/* SPDX-License-Identifier: MIT */
/* reset.pml - the reset gate: a pair reset keeps new callers out and
 * drains those inside before the pair is reinitialised (gpumem_nvme.h:
 * gpumem__gate_enter, gpumem__gate_leave, gpumem__budget_put_leave,
 * gpumem__gate_close, gpumem__gate_open, gpumem__qp_hush,
 * gpumem_nvme_qp_abort, gpumem__qp_reinit; the callers
 * gpumem__qp_submit_within, gpumem_nvme_qp_poll with gpumem__poll_look,
 * gpumem__poll_inside and gpumem__poll_closed; the sequence of
 * gpumem_nvmectl_reset_begin/_end), exhausted by Spin. `make spin` runs it.
 *
 * WHAT IS CHECKED
 *   - no thread is inside a call on the pair (touching its rings,
 *     counters or locks) while gpumem__qp_reinit rewrites them, and none
 *     enters until the gate opens again;
 *   - no doorbell is written for a queue the controller has deleted (the
 *     quiet flag and gpumem__qp_hush);
 *   - a request that has ended (its owner told its result or EABORTED) is
 *     never carried out afterwards: its buffer is the owner's again;
 *   - the books balance: at the end nobody is counted inside, every ID is
 *     free or an orphan still waiting for its late completion (each
 *     holding its unit), and every request ended once;
 *   - no deadlock: the reset's reinit eventually finds the pair empty (it
 *     retries on EBUSY), and every caller finishes.
 *
 * CORRESPONDENCE (code -> model; one Promela statement = one atomic step)
 *   the gate word qp->inflight (units, calls, closed bit; the ID-candidate
 *     field is left out)                        -> g_units, g_calls, g_closed, changed together
 *   gpumem__gate_enter: relaxed load, closed: -1; fetch_add(CALL + unit);
 *     closed: fetch_sub, -1; over the limit: fetch_sub 1, 0
 *                                               -> Enter(): one step per atomic
 *   gpumem__gate_leave: fetch_sub(CALL)         -> one step
 *   gpumem__budget_put_leave: fetch_sub(1 + CALL) -> one step
 *   gpumem__cid_pick/try_id (a free ID: CAS to IN_USE) -> one step per candidate
 *   gpumem__submit: ID word IN_USE|SUBMITTED; gpumem__sq_push /
 *     gpumem__sq_move_tail: the tail lock, load quiet, doorbell unless quiet
 *                                               -> lock (blocking: the handshake is sq.pml's), load,
 *                                                  store, unlock
 *   gpumem__cq_harvest / gpumem__cpl_take (CAS CLAIMED, then DONE, or for
 *     an orphan the ID freed and its unit given back) / gpumem__cq_move_head
 *     (the head lock, load quiet, CQ doorbell unless quiet)
 *   gpumem__qp_submit_within: load stopped, nonzero: refused; enter with a
 *     unit; a free ID; the ID word; the push; leave
 *   gpumem_nvme_qp_poll: gpumem__poll_look (collect_done without entering:
 *     CAS the word free, give the unit back); enter; closed:
 *     gpumem__poll_closed (load stopped: not ABORTED yet, collect if the
 *     result came, else EAGAIN; ABORTED: gpumem__cid_orphan's CAS, else
 *     wait for the claimed result and collect it); inside:
 *     gpumem__poll_inside (collect with the leave; else harvest; stopped
 *     ABORTED: orphan and leave; else leave, EAGAIN)
 *   gpumem_nvmectl_reset_begin: gate_close; stopped = RESETTING; hush
 *     (quiet = 1; take and drop the tail lock, then the head lock); delete
 *     SQ, delete CQ; gpumem_nvme_qp_abort (gate_close; stopped = ABORTED)
 *   gpumem_nvmectl_reset_end: gpumem__qp_reinit(qp, 0) (stopped must be
 *     ABORTED; fetch_or(CLOSED) returns calls != 0: EBUSY; each ID word:
 *     ORPHAN: CAS free and give its unit back; held without a result: the
 *     aborted completion, CAS to DONE; the rings restarted; quiet = 0);
 *     create the queues; stopped = RUNNING; gate_open
 *                                               -> Reset: one step each; reset_end's EBUSY is retried
 *                                                  once the gate word has changed
 *   the controller: fetches what a doorbell handed over while the SQ
 *     exists, carries it out (DMA), posts the completion while the CQ
 *     exists; deleting the SQ drops what it fetched and did not complete
 * ABSTRACTED
 *   - memory order: sequential consistency (see sq.pml);
 *   - the rings: a command is handed over or not, a completion posted or
 *     not (sq.pml and cq.pml model them); the locks are blocking here;
 *   - the blocking calls (exec, wait) enter and leave as a poll does and
 *     are left out; so are timeouts, the stop word's ENODEV, parking, and
 *     the CID generation and reuse rules (cq.pml);
 *   - waits (a poll finding nothing, an EAGAIN, reset_end's EBUSY) block
 *     until a word they looked at changes.
 *
 * SEEDED BUGS (-DSEEDED_BUG=n; each must make pan report an error)
 *   1  gpumem__gate_enter trusts its first look: the fetch_add's own view
 *      of the closed bit is ignored, so a caller that looked before the
 *      close enters after reinit saw nobody inside (assertion);
 *   2  gpumem__qp_hush only raises quiet, without passing through the
 *      locks: a mover that read quiet before it rose rings a doorbell of a
 *      deleted queue (assertion);
 *   3  the reset marks the pair aborted before deleting its SQ (the
 *      deletion's order in gpumem_nvmectl_reset_begin): a poll ends its
 *      request EABORTED and the controller then carries it out into the
 *      buffer its owner has taken back (assertion);
 *   4  gpumem__poll_closed as it was before this model: it gave the request
 *      up as soon as it found the gate closed. gpumem_nvmectl_reset_begin
 *      closes the gate first and deletes the queues after, so a poll in
 *      between ended its request EABORTED while the controller could still
 *      carry it out (assertion) - a bug of the code, found here and fixed
 *      with the model;
 *   5  the end of a reset as it was: the gate opened, then the pair marked
 *      running. A caller that looked at the stopped word before the reset
 *      began enters in between, submits to the new queues, finds the pair
 *      still aborted and gives its command up, which the controller then
 *      carries out (assertion) - the other bug of the code found here.
 */

#ifndef NUSER
#define NUSER 2
#endif
#ifndef REQS
#define REQS 1         /* requests per user */
#endif
#ifndef LIMIT
#define LIMIT 1        /* the asynchronous budget (async_limit) */
#endif
#define NCID 2
#ifndef SEEDED_BUG
#define SEEDED_BUG 0
#endif

/* ID word bits */
#define IN_USE 1
#define SUB 2
#define ORPHAN 4
#define CLAIMED 8
#define DONE 16
#define ABORTED_R 32   /* the mailbox says "aborted" (the reinit's completion) */
/* stopped word */
#define RUNNING 0
#define RESETTING 3
#define ABORTED 2

#define TOUCH changed[0] = 1; changed[1] = 1

/* the gate word */
byte g_units = 0, g_calls = 0;
bit g_closed = 0;
/* the pair */
byte stopped = RUNNING;
bit quiet = 0;
bit tail_lock = 0, head_lock = 0;
byte cw[NCID];
byte req_of[NCID];     /* which request an ID carries (the command's buffer) */
/* the controller's side */
bit sq_deleted = 0, cq_deleted = 0;
bit handed[NCID];      /* a doorbell handed its command over */
bit fetched[NCID];
bit posted[NCID];      /* its completion is in the CQ, not yet harvested */
/* ghosts */
bit changed[2];
byte inside = 0;       /* threads counted inside a call */
bit reiniting = 0;
bit ended[NUSER * REQS + 1];
byte nended = 0;
byte users_done = 0;

#define RING assert(!reiniting)   /* a step that touches the pair's rings, counters or locks */

/* gpumem__gate_enter(qp, unit, LIMIT): res = -1, 0 or 1 */
inline enter(unit) {
  atomic { oc = g_closed; ou = g_units };
  if
  :: oc -> res = 255
  :: else ->
     add = (unit && ou < LIMIT);
     atomic {
       oc = g_closed; ou = g_units; g_calls++; g_units = g_units + add; TOUCH;
#if SEEDED_BUG == 1
       inside++
#else
       if
       :: !oc -> inside++
       :: else
       fi
#endif
     };
#if SEEDED_BUG != 1
     if
     :: oc -> atomic { g_calls--; g_units = g_units - add; TOUCH }; res = 255
     :: else ->
#else
     if
     :: true ->
#endif
        if
        :: !add -> res = 0
        :: add && ou < LIMIT -> res = 1
        :: add && ou >= LIMIT -> atomic { g_units--; TOUCH }; res = 0
        fi
     fi
  fi;
  atomic { oc = 0; ou = 0; add = 0 }
}

inline leave() {
  atomic { g_calls--; inside--; TOUCH }
}

/* gpumem__cq_harvest: take every posted completion (this thread is inside) */
inline harvest() {
  k = 0;
  do
  :: k < NCID ->
     if
     :: atomic { posted[k] && head_lock == 0 -> RING; head_lock = 1; TOUCH }; /* a completion: claim it under the head */
        w = cw[k];
        if
        :: (w & (IN_USE | SUB | CLAIMED | DONE)) == (IN_USE | SUB) && !(w & ORPHAN) ->
           atomic { if :: cw[k] == w -> cw[k] = w | CLAIMED; TOUCH :: else fi };
           atomic { if :: cw[k] == (w | CLAIMED) -> cw[k] = IN_USE | DONE; TOUCH :: else fi }
        :: (w & (IN_USE | SUB | ORPHAN | CLAIMED | DONE)) == (IN_USE | SUB | ORPHAN) ->
           /* a late completion of a given-up command: its ID freed, its unit back */
           atomic { if :: cw[k] == w -> cw[k] = 0; g_units--; TOUCH :: else fi }
        :: else
        fi;
        atomic { posted[k] = 0; TOUCH };
        q = quiet;
        if
        :: !q -> atomic { assert(!cq_deleted); RING }   /* the CQ doorbell */
        :: else
        fi;
        atomic { head_lock = 0; TOUCH; q = 0; w = 0 }
     :: else
     fi;
     k++
  :: else -> break
  od;
  k = 0
}

/* gpumem__cid_collect_done for the user's ID c: got = 1 if collected */
inline collect(leaving) {
  w = cw[c];
  if
  :: (w & (IN_USE | ORPHAN | DONE)) == (IN_USE | DONE) ->
     atomic {
       if
       :: cw[c] == w ->
          cw[c] = 0; g_units--;
          if
          :: leaving -> g_calls--; inside--
          :: else
          fi;
          TOUCH; got = 1; aborted = (w & ABORTED_R) != 0
       :: else
       fi
     }
  :: else
  fi;
  w = 0
}

/* a request ends: its owner has its result (or EABORTED) */
#define END_REQ atomic { assert(!ended[r]); ended[r] = 1; nended++ }

proctype User(byte me) {
  byte n = 0, r, res, oc, ou, add, c, w, k;
  bit got, aborted, q, done;
  do
  :: n < REQS ->
     atomic { n++; r = me * REQS + n; done = 0 };
     /* gpumem__qp_submit_within */
     do
     :: changed[me] = 0;
        atomic { res = stopped };
        if
        :: res != RUNNING -> res = 255                 /* stopped: refused before the gate */
        :: else -> enter(1)
        fi;
        if
        :: res == 255 -> END_REQ; done = 1; break     /* closed for a reset: EABORTED, nothing sent */
        :: res == 0 ->                                 /* no budget: EAGAIN, retry */
           harvest(); leave(); changed[me] == 1
        :: res == 1 ->
           /* gpumem__cid_pick: a free ID (one is: the budget counts the held ones) */
           c = 0;
           do
           :: atomic { cw[c] == 0 -> RING; cw[c] = IN_USE; req_of[c] = r; TOUCH; break }
           :: cw[c] != 0 -> c = 1 - c
           od;
           cw[c] = IN_USE | SUB;
           /* the push: tail lock, quiet, doorbell */
           atomic { tail_lock == 0 -> RING; tail_lock = 1; TOUCH };
           q = quiet;
           if
           :: !q -> atomic { assert(!sq_deleted); RING; handed[c] = 1; TOUCH }
           :: else
           fi;
           atomic { tail_lock = 0; TOUCH; q = 0 };
           leave();
           break
        fi
     od;
     /* gpumem_nvme_qp_poll until it ends */
     do
     :: done -> break
     :: !done ->
        changed[me] = 0;
        got = 0;
        collect(0);                                    /* gpumem__poll_look */
        if
        :: got -> END_REQ; break
        :: else
        fi;
        enter(0);
        if
        :: res == 255 ->                               /* gpumem__poll_closed */
#if SEEDED_BUG != 4
           atomic { res = stopped };
           if
           :: res != ABORTED ->                        /* the queues not deleted yet: not given up */
              collect(0);
              if
              :: got -> END_REQ; break
              :: else -> changed[me] == 1              /* EAGAIN: poll again */
              fi
           :: else ->
#else
           if
           :: true ->
#endif
              w = cw[c];
              if
              :: (w & (IN_USE | SUB | CLAIMED | DONE | ORPHAN)) == (IN_USE | SUB) ->
                 atomic { if :: cw[c] == w -> cw[c] = w | ORPHAN; TOUCH; got = 1 :: else fi }
              :: else
              fi;
              if
              :: got -> END_REQ; break                 /* EABORTED */
              :: else -> changed[me] == 1              /* claimed: its result is a few stores away */
              fi
           fi
        :: else ->                                     /* gpumem__poll_inside */
           collect(1);
           if
           :: got -> END_REQ; break
           :: else
           fi;
           harvest();
           collect(1);
           if
           :: got -> END_REQ; break
           :: else
           fi;
           if
           :: atomic { stopped == ABORTED -> w = cw[c] };
              if
              :: (w & (IN_USE | SUB | CLAIMED | DONE | ORPHAN)) == (IN_USE | SUB) ->
                 atomic { if :: cw[c] == w -> cw[c] = w | ORPHAN; TOUCH; got = 1 :: else fi }
              :: else
              fi;
              w = 0;
              if
              :: got -> leave(); END_REQ; break        /* EABORTED */
              :: else -> leave(); changed[me] == 1
              fi
           :: atomic { stopped != ABORTED -> leave() }; changed[me] == 1   /* EAGAIN: poll again */
           fi
        fi
     od;
     atomic { c = 0; w = 0; got = 0; aborted = 0; res = 0; r = 0 }
  :: n == REQS -> break
  od;
  users_done++
}

/* The controller: fetches what was handed over, carries it out, posts. */
proctype Ctl() {
  byte k;
  do
  :: atomic {
       !sq_deleted && (handed[0] && !fetched[0] || handed[1] && !fetched[1]) ->
       if
       :: handed[0] && !fetched[0] -> k = 0
       :: handed[1] && !fetched[1] -> k = 1
       fi;
       fetched[k] = 1; handed[k] = 0
     };
     /* carry it out: the DMA into the request's buffer */
     atomic {
       if
       :: !sq_deleted && fetched[k] -> assert(!ended[req_of[k]])
       :: else
       fi
     };
     atomic {
       if
       :: !cq_deleted && !sq_deleted && fetched[k] -> posted[k] = 1; TOUCH
       :: else
       fi;
       fetched[k] = 0; k = 0
     }
  :: users_done == NUSER -> break
  od
}

proctype Reset() {
  byte calls, k, w;
  bit q;
  /* gpumem_nvmectl_reset_begin */
  atomic { g_closed = 1; TOUCH };
  atomic { stopped = RESETTING; TOUCH };
  /* gpumem__qp_hush */
  quiet = 1;
#if SEEDED_BUG != 2
  atomic { tail_lock == 0 -> tail_lock = 1 };
  tail_lock = 0;
  atomic { head_lock == 0 -> head_lock = 1 };
  head_lock = 0;
#endif
#if SEEDED_BUG == 3
  atomic { g_closed = 1; stopped = ABORTED; TOUCH };
#endif
  /* delete the SQ (what was fetched is dropped), then the CQ */
  atomic { sq_deleted = 1; handed[0] = 0; handed[1] = 0; fetched[0] = 0; fetched[1] = 0; TOUCH };
  atomic { cq_deleted = 1; TOUCH };
  /* gpumem_nvme_qp_abort */
#if SEEDED_BUG != 3
  atomic { g_closed = 1; TOUCH };
  atomic { stopped = ABORTED; TOUCH };
#endif
  /* gpumem_nvmectl_reset_end: gpumem__qp_reinit(qp, 0), EBUSY retried */
  do
  :: atomic { calls = g_calls; g_closed = 1 };
     if
     :: calls == 0 -> break
     :: else -> g_calls != calls
     fi
  od;
  atomic { reiniting = 1; assert(inside == 0) };
  k = 0;
  do
  :: k < NCID ->
     w = cw[k];
     if
     :: !(w & IN_USE) || (w & DONE) -> k++                       /* free, or a result to collect */
     :: (w & IN_USE) && !(w & DONE) && (w & ORPHAN) ->            /* nobody waits: free */
        atomic { if :: cw[k] == w -> cw[k] = 0; g_units--; TOUCH; k++ :: else fi }
     :: (w & IN_USE) && !(w & DONE) && !(w & ORPHAN) ->           /* its owner finds it aborted */
        atomic { if :: cw[k] == w -> cw[k] = IN_USE | DONE | ABORTED_R; TOUCH; k++ :: else fi }
     fi
  :: else -> break
  od;
  /* gpumem__qp_restart: the rings afresh */
  atomic { assert(inside == 0 && tail_lock == 0 && head_lock == 0);
           posted[0] = 0; posted[1] = 0; handed[0] = 0; handed[1] = 0; quiet = 0; TOUCH };
  atomic { assert(inside == 0); reiniting = 0 };
  /* create the queues; open; running */
  atomic { sq_deleted = 0; cq_deleted = 0; TOUCH };
#if SEEDED_BUG == 5
  atomic { g_closed = 0; TOUCH };
  atomic { stopped = RUNNING; TOUCH }
#else
  atomic { stopped = RUNNING; TOUCH };
  atomic { g_closed = 0; TOUCH }
#endif
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NUSER -> run User(i); i++
    :: else -> break
    od;
    run Ctl();
    run Reset()
  };
  _nr_pr == 1;
  /* every ID free, or an orphan whose late completion nobody harvested
   * yet (it keeps its ID and its unit until then, or a reset) */
  assert(g_calls == 0 && inside == 0 && !g_closed && nended == NUSER * REQS &&
         (cw[0] == 0 || cw[0] == (IN_USE | SUB | ORPHAN)) && (cw[1] == 0 || cw[1] == (IN_USE | SUB | ORPHAN)) &&
         g_units == (cw[0] != 0) + (cw[1] != 0))
}
