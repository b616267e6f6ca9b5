/* SPDX-License-Identifier: MIT */
/* share.pml - one cell of the share's miss queue: GPU threads post and
 * withdraw requests, a pool of host server threads takes, serves, skips
 * and catches up (the poster's side: gpumem__share_claim_cell,
 * gpumem__share_post_once, gpumem__share_free_cell; the server's:
 * gpumem__share_serve_pass, gpumem__share_take, gpumem__share_catch_up),
 * exhausted by Spin. `make spin` runs it.
 *
 * WHAT IS CHECKED
 *   - a request is served at most once, and never after its poster left
 *     (withdrawn untaken, or answered SKIPPED: its slot is the cache's
 *     again): the serve step asserts both;
 *   - a poster answered DONE finds the status of its own request, served
 *     exactly once; one that withdrew finds its request never served;
 *   - answer's generation never moves back (each store and compare-and-
 *     swap is checked against the last generation answer held);
 *   - no deadlock: with requests that never time out, every request is
 *     answered and the servers stop (an invalid end state otherwise).
 *   The catch-up configuration (CATCHUP_RUN: one poster, one server, 10
 *   requests) checks that a cell whose requests are withdrawn untaken
 *   again and again is still taken afterwards - answer never falls half a
 *   range behind post, and nobody waits for ever - under the timing the
 *   code assumes (SCALE, below).
 *
 * SCALE: the code's generations are 29-bit (a word's bits above 3, steps of
 * GPUMEM__SQ_NEXT_GEN = 8) compared modulo 2^32 (GPUMEM__SQ_BEFORE: half a
 * range is 2^28 requests), and caught up beyond GPUMEM__SQ_CATCH_UP (2^21
 * requests). Here a word is gen * 4 + state, generations run modulo G
 * and CATCHUP is 2 requests. The code assumes a server's look is never
 * half a range old; with requests in the thousands rather than 2^28 the
 * model must assume it: in the safety configuration G (16) is more than
 * twice the requests (3), so no look can be; in the catch-up
 * configuration no claim is made while a server's look is STALE (3)
 * requests old, and (the timing the catch-up relies on: the code's
 * servers look every 20 us, far more often than every 2^21 requests)
 * none while MPASS (2) requests were posted since a server's look last
 * found the cell unposted. Its 10 requests wrap the generations. A look
 * 6 requests stale would make a catch-up move answer back by half a
 * range: the bound is real (half a range less GPUMEM__SQ_CATCH_UP), and
 * the code's margin for it is 2^28 - 2^21 requests.
 *
 * CORRESPONDENCE (code -> model; one Promela statement = one atomic step)
 *   gpumem__share_claim_cell: load post; FREE: CAS to GEN|CLAIMED
 *                                               -> Poster: load; CAS (no cell free until the
 *                                                  deadline, ETIMEDOUT, posts nothing: left out)
 *   the request's fields (kind, owner, slot, line, n) -> cell_req = the request's number (one step)
 *   store post = gen|POSTED (release)           -> one step
 *   the wait loop: load answer;
 *     gen|DONE: read status, free the cell (post = gen+1|FREE, release)
 *     gen|SKIPPED: free, ETIMEDOUT
 *     not withdrawing, not gen|TAKEN, deadline passed (or no server):
 *       store WITHDRAWN; fence (seq_cst); load answer;
 *       other generation or NONE: free, ETIMEDOUT; else wait for DONE/SKIPPED
 *                                               -> one step per load and store; the deadline is
 *                                                  a nondeterministic choice (a poster may also
 *                                                  wait for ever: the deadlock check)
 *   gpumem__share_serve_pass: seen = load post; not POSTED: catch_up
 *   gpumem__share_take: load answer; refuse unless gen|NONE or an older
 *     generation (GPUMEM__SQ_BEFORE); CAS to gen|TAKEN; fence; load post:
 *     gen|POSTED: serve; else CAS gen|TAKEN -> gen|SKIPPED
 *   serve: gpumem__share_serve_one reads the fields, fills, stores status;
 *     store answer = gen|DONE (release)         -> Server: one step each
 *   gpumem__share_catch_up: load answer; BEFORE(GEN(a), GEN(seen) -
 *     CATCH_UP): CAS to (GEN(seen) - NEXT_GEN)|SKIPPED -> two steps
 *   gpumem_share_server_stop: stop, once every poster is done -> init sets `stop`
 * ABSTRACTED
 *   - memory order: sequential consistency; the two seq_cst fences of the
 *     withdrawal's handshake (Dekker's) are what makes that sound for the
 *     pair of steps they order (seeded bug 3 removes the poster's and
 *     models its store buffer);
 *   - one cell: posters of one GPU owner (cells are independent, each
 *     owner's its own); the request's fields are one number, the fill is
 *     one step; the servers' count (q->servers) is always nonzero while
 *     posters run;
 *   - waits: a poster or an idle server blocks until a word it looked at
 *     changes (a look at unchanged words does the same again);
 *   - the pause/back-off, EAGAIN re-posting (a new request, as here);
 *   - ghosts: the request numbers, served/left counts, and for the catch-up
 *     configuration's timing `look` (when each server's look was made) and
 *     `unpassed` (requests posted since a look found the cell unposted).
 *
 * SEEDED BUGS (-DSEEDED_BUG=n; each must make pan report an error)
 *   1  the take of 0.4 before 48b9b35 ("share: a request is served once"):
 *      refuse only an answer of the same generation that is not NONE, CAS
 *      any other back to gen|TAKEN, and on a changed post store
 *      gen|SKIPPED over whatever answer holds: a stale server puts an older
 *      generation back over another's TAKEN, and the newer request is
 *      served twice (assertion);
 *   2  no catch-up (before 346941c): in the catch-up configuration the
 *      requests withdrawn untaken put answer half a range behind post,
 *      where the modular order no longer tells older from newer (pan: a
 *      take moves answer by half a range, assertion), and past it the cell
 *      is never taken again (a waiting poster would wait for ever);
 *   3  the withdrawal without its fence (the poster's half of Dekker's
 *      handshake): its WITHDRAWN store goes to a store buffer and reaches
 *      memory after its look at answer, so poster and server each miss the
 *      other - the poster leaves, the server serves into the slot given
 *      back (assertion). The only step of any model where a store's
 *      delay is modelled: it shows the fence is needed, and that the model
 *      could tell.
 */

#ifndef CATCHUP
#define CATCHUP 2      /* GPUMEM__SQ_CATCH_UP, in requests */
#endif
#ifndef CATCHUP_RUN
#define CATCHUP_RUN 0
#endif
#if CATCHUP_RUN
#ifndef G
#define G 16           /* generations modulo G: half a range is 8 requests */
#endif
#ifndef STALE
#define STALE 3        /* a server's look is fewer than STALE requests old */
#endif
#ifndef NPOST
#define NPOST 1
#endif
#ifndef REQS
#define REQS 10        /* more than half a range: withdrawn untaken, they would put answer "ahead" */
#endif
#ifndef NSERV
#define NSERV 1
#endif
#ifndef MPASS
#define MPASS 2        /* a server's look finds the cell unposted at least once every MPASS requests */
#endif
#else
#ifndef G
#define G 16           /* more than twice the requests: no look is half a range old */
#endif
#define STALE 255
#ifndef NPOST
#define NPOST 1
#endif
#ifndef REQS
#define REQS 3         /* each poster's */
#endif
#ifndef NSERV
#define NSERV 2
#endif
#define MPASS 255
#endif
#ifndef SEEDED_BUG
#define SEEDED_BUG 0
#endif

/* post states; answer states */
#define FREE 0
#define CLAIMED 1
#define POSTED 2
#define WITHDRAWN 3
#define NONE 0
#define TAKEN 1
#define DONE 2
#define SKIPPED 3
#define WORD(g, s) ((g) * 4 + (s))
#define GEN(w) ((w) / 4)
#define STATE(w) ((w) & 3)
#define GADD(g, k) (((g) + (k) + G) % G)
#define BEFORE(g, h) ((((g) - (h) + G) % G) >= G / 2)   /* GPUMEM__SQ_BEFORE */
#define NREQ (NPOST * REQS)

byte post = WORD(0, FREE);     /* cell->post */
byte answer = WORD(0, NONE);   /* cell->answer */
byte cell_req;                 /* the request's fields: here which request it is */
byte status;                   /* cell->status: here which request was served */
bit stop = 0;

/* ghosts */
byte nreq = 0;                 /* requests claimed so far (their numbers: 1..) */
byte served[NREQ + 1];         /* times each request was served */
bit left[NREQ + 1];            /* its poster gave the slot back without a result */
byte unpassed = 0;             /* requests posted since a server last passed the cell unposted */
byte look[NSERV];              /* 1 + nreq when the server's look at post was made (0: none open) */
byte done_posters = 0;

/* the timing the code assumes: no server's look is STALE requests old */
#if STALE < 255
#if NSERV == 1
#define FRESH (look[0] == 0 || nreq + 1 - look[0] < STALE)
#else
#error the catch-up configuration has one server
#endif
#else
#define FRESH 1
#endif

/* Seeded bug 3: the poster's WITHDRAWN store without the fence after it,
 * as a store buffer (x86's TSO; C11 allows more): the store reaches memory
 * at some later step (Flusher), after the poster's load of answer; its
 * later stores to post drain the buffer first (stores stay in order). */
#if SEEDED_BUG == 3
bit buffered = 0;
byte buffered_val;
#define DRAINED (buffered == 0);
proctype Flusher() {
  do
  :: atomic { buffered -> post = buffered_val; buffered = 0 }
  :: stop -> break
  od
}
#else
#define DRAINED
#endif

/* answer's generation never moves back: from a, to b */
#define FORWARD(a, b) assert(!BEFORE(GEN(b), GEN(a)))

proctype Poster() {
  byte k = 0, gen, w, a, r;
  bit withdrawing;
  do
  :: k < REQS ->
     withdrawing = 0;
     /* gpumem__share_claim_cell */
     do
     :: atomic { unpassed < MPASS && FRESH -> w = post };
        if
        :: STATE(w) == FREE ->
           atomic {
             if
             :: post == w -> post = WORD(GEN(w), CLAIMED); gen = GEN(w); nreq++; r = nreq; break
             :: else
             fi
           }
        :: else -> post != w   /* busy: look again once it changes */
        fi
     od;
     cell_req = r;
     atomic { post = WORD(gen, POSTED); if :: MPASS < 255 -> unpassed++ :: else fi };
     /* gpumem__share_post_once's wait */
     do
     :: a = answer;
        if
        :: a == WORD(gen, DONE) ->
           atomic { assert(status == r && served[r] == 1); w = status };
           DRAINED
           post = WORD(GADD(gen, 1), FREE);
           break
        :: a == WORD(gen, SKIPPED) ->
           atomic { assert(served[r] == 0); left[r] = 1 };
           DRAINED
           post = WORD(GADD(gen, 1), FREE);
           break
        :: else ->
           if
           :: !withdrawing && a != WORD(gen, TAKEN) ->   /* the deadline passed (or never: the other option) */
#if SEEDED_BUG == 3
              atomic { buffered_val = WORD(gen, WITHDRAWN); buffered = 1 };   /* into the store buffer */
#else
              post = WORD(gen, WITHDRAWN);
              /* the seq_cst fence */
#endif
              a = answer;
              if
              :: GEN(a) != gen || STATE(a) == NONE ->   /* not taken: never will be */
                 atomic { assert(served[r] == 0); left[r] = 1 };
                 DRAINED
                 post = WORD(GADD(gen, 1), FREE);
                 break
              :: else -> withdrawing = 1                /* taken: DONE or SKIPPED follows */
              fi
           :: answer != a -> skip
           fi
        fi
     od;
     atomic { k++; gen = 0; w = 0; a = 0; r = 0; withdrawing = 0 }
  :: k == REQS -> break
  od;
  done_posters++
}

proctype Server(byte me) {
  byte seen, a, p, gen, r;
  bit busy;
  do
  :: stop -> break
  :: !stop ->
     busy = 0;
     atomic { seen = post; look[me] = nreq + 1; if :: STATE(seen) != POSTED -> unpassed = 0 :: else fi };
     if
     :: STATE(seen) != POSTED ->
        /* gpumem__share_catch_up */
        a = answer;
#if SEEDED_BUG != 2
        if
        :: BEFORE(GEN(a), GADD(GEN(seen), -CATCHUP)) ->
           atomic {
             if
             :: answer == a -> FORWARD(a, WORD(GADD(GEN(seen), -1), SKIPPED));
                answer = WORD(GADD(GEN(seen), -1), SKIPPED); busy = 1
             :: else
             fi
           }
        :: else
        fi
#endif
     :: else ->
        /* gpumem__share_take */
        gen = GEN(seen);
        a = answer;
#if SEEDED_BUG == 1
        if
        :: GEN(a) == gen && STATE(a) != NONE -> skip   /* another server's */
        :: else ->
           atomic {
             if
             :: answer == a -> answer = WORD(gen, TAKEN); busy = 1   /* (no FORWARD: the old rule goes back) */
             :: else
             fi
           };
           if
           :: busy ->
              /* the fence */
              p = post;
              if
              :: p != WORD(gen, POSTED) -> answer = WORD(gen, SKIPPED); busy = 0
              :: else
              fi
           :: else
           fi
        fi;
#else
        if
        :: a != WORD(gen, NONE) && !BEFORE(GEN(a), gen) -> skip
        :: else ->
           atomic {
             if
             :: answer == a -> FORWARD(a, WORD(gen, TAKEN)); answer = WORD(gen, TAKEN); busy = 1
             :: else
             fi
           };
           if
           :: busy ->
              /* the fence */
              p = post;
              if
              :: p != WORD(gen, POSTED) ->
                 atomic { if :: answer == WORD(gen, TAKEN) -> answer = WORD(gen, SKIPPED) :: else fi };
                 busy = 0
              :: else
              fi
           :: else
           fi
        fi;
#endif
        if
        :: busy ->   /* gpumem__share_serve_one: read the request, fill its slot */
           atomic { r = cell_req; assert(!left[r]); served[r]++; assert(served[r] == 1); status = r };
           atomic { FORWARD(answer, WORD(gen, DONE)); answer = WORD(gen, DONE) }
        :: else
        fi
     fi;
     /* nothing done: look again once a word changes (or it is time to stop,
      * or time for the periodic pass) */
     if
     :: busy
     :: !busy -> atomic { post != seen || answer != a || stop || unpassed >= MPASS }
     fi;
     atomic { seen = 0; a = 0; p = 0; gen = 0; r = 0; busy = 0; look[me] = 0 }
  od
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NPOST -> run Poster(); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NSERV -> run Server(i); i++
    :: else -> break
    od;
#if SEEDED_BUG == 3
    run Flusher()
#endif
  };
  done_posters == NPOST;
  stop = 1;
  _nr_pr == 1;
  i = 1;
  do
  :: i <= nreq -> assert(served[i] == 1 && !left[i] || served[i] == 0 && left[i]); i++
  :: else -> break
  od
}
