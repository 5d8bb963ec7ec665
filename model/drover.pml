/*
 * drover's kernel protocol, checked exhaustively by SPIN (ADR 0055).
 *
 * One atomic step here is one SQL statement or one transaction of
 * sql/queries/kernel.sql (and the few others the kernel's paths run); the
 * table in docs/adr/0055-a-checked-model-of-the-kernel.md maps every step,
 * named in a comment "step: <name>", to its statement, and
 * tests/model/test_mapping.py keeps the two in step. Everything between
 * atomic steps (deciding an outcome, a crash, a pause) is a worker's own,
 * and interleaves freely with everybody else's steps.
 *
 * Two parts, checked apart (they share no state):
 *   -DKERNEL  workers (claim, heartbeat, outcome writes, complete_tx, crash,
 *             shutdown hand-back), the rescuer, the lease clock, an
 *             operator's cancel;
 *   -DLEADER  the periodic leader's lease row (lease candidates, the clock)
 *             and the tick watermark.
 *
 * Planted bugs (-DBUG_...) each break one invariant; tools/model_check.py
 * runs them all and expects exactly that invariant to fail.
 *
 * Invariants: each is a ghost bit, set when the property breaks, and one
 * assertion that it is clear, so SPIN's report names it:
 *   violated_no_stale_write      a write applied for a superseded claim
 *   violated_terminal_once       a job reached a terminal state twice
 *   violated_effects_once        complete_tx effects committed other than
 *                                exactly with the job's completion
 *   violated_no_job_lost         at the end, a job not terminal
 *   violated_lease_exclusive     a job claimed or rescued while an earlier
 *                                execution still held a lease it saw live
 *   violated_one_leader          two candidates hold unexpired leases
 *   violated_tick_once           a periodic fire time inserted twice
 */

#ifndef NW
#define NW 2            /* workers */
#endif
#define NJ 2            /* jobs */
#ifndef MAXATT
#define MAXATT 2        /* max_attempts */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* worker crashes, in all */
#endif
#ifndef MAXSHUT
#define MAXSHUT 1       /* escalated shutdowns (hand-backs), in all */
#endif
#ifndef MAXSNOOZE
#define MAXSNOOZE 1     /* snoozes (an attempt refunded), in all */
#endif
#ifndef MAXCANCEL
#define MAXCANCEL 1     /* an operator's cancels (0 or 1) */
#endif
#ifndef NC
#define NC 3            /* leader candidates */
#endif

/* drover_job_state (scheduled and available are one: dueness is abstracted) */
mtype = { available, running, retryable, completed, cancelled, dead };
#define WAITING(s)  ((s) == available || (s) == retryable)
#define TERMINAL(s) ((s) == completed || (s) == cancelled || (s) == dead)

/* leased_until, against the database clock */
#define NOLEASE 0       /* NULL */
#define LIVE    1       /* > now() */
#define EXPIRED 2       /* <= now() */

/* what a write asks for */
mtype = { complete, fail, snooze, handback };

bit violated_no_stale_write;
bit violated_terminal_once;
bit violated_effects_once;
bit violated_no_job_lost;
bit violated_lease_exclusive;
bit violated_one_leader;
bit violated_tick_once;

/* Which invariants are asserted: all of them, unless -DONLY names one (a
 * planted bug's run: the others' ghosts are still kept, not asserted). */
#ifdef ONLY
#define ASSERTED(flag) (ONLY == flag)
#else
#define ASSERTED(flag) true
#endif
#define I_no_stale_write  1
#define I_terminal_once   2
#define I_effects_once    3
#define I_no_job_lost     4
#define I_lease_exclusive 5
#define I_one_leader      6
#define I_tick_once       7

#define CHECK(inv, cond) \
	if :: !(cond) -> violated_##inv = 1 :: else -> skip fi; \
	assert(!(violated_##inv && ASSERTED(I_##inv)))

#ifdef KERNEL

/* ---- the job rows ------------------------------------------------------- */

mtype state[NJ];
byte attempt[NJ];
byte leased[NJ];
bit cancel_req[NJ];     /* cancel_request IS NOT NULL */

/* ghosts: what no row stores */
byte finals[NJ];        /* times the job entered a terminal state */
byte effects[NJ];       /* committed complete_tx user effects */
bit txdone[NJ];         /* the job was completed by a complete_tx */

/* each worker's claim as its client sees it */
byte wjob[NW];          /* the claimed job, or NJ: none */
bit wlive[NW];          /* ghost: the lease it holds is live on its own clock (job.lease) */
bit wsup[NW];           /* ghost: a newer claim of its job was made since */

byte crashes;
byte shutdowns;
byte snoozes;

/* Spend one of a fault's budget, or block: the model's own bookkeeping of its
 * bounds (no row is involved), taken whole so that two workers cannot both
 * spend the last one. */
#define SPEND(budget, most) d_step { budget < most -> budget++ }

#define J wjob[w]

#ifdef BUG_NO_FENCE
/* the guard on state alone (ADR 0002, alternative 2): no attempt */
#define FENCE(j, a) (state[j] == running)
#elif defined(BUG_FENCE_NO_STATE)
/* the attempt without state = 'running' */
#define FENCE(j, a) (attempt[j] == (a))
#else
#define FENCE(j, a) (state[j] == running && attempt[j] == (a))
#endif

/* A write for worker w's claim may apply only while that claim is the job's
 * current one: the row running, and no newer claim made. */
#define NOT_STALE CHECK(no_stale_write, state[J] == running && !wsup[w])

#if NW == 2
#define NOBODY_LIVE(j) (!(wlive[0] && wjob[0] == (j)) && !(wlive[1] && wjob[1] == (j)))
#define EACH_HOLDER(j, act) \
	if :: wjob[0] == (j) -> act(0) :: else -> skip fi; \
	if :: wjob[1] == (j) -> act(1) :: else -> skip fi
#else
#define NOBODY_LIVE(j) (!(wlive[0] && wjob[0] == (j)) && !(wlive[1] && wjob[1] == (j)) \
	&& !(wlive[2] && wjob[2] == (j)))
#define EACH_HOLDER(j, act) \
	if :: wjob[0] == (j) -> act(0) :: else -> skip fi; \
	if :: wjob[1] == (j) -> act(1) :: else -> skip fi; \
	if :: wjob[2] == (j) -> act(2) :: else -> skip fi
#endif
#define UNLIVE(x) wlive[x] = 0
#define SUPERSEDE(x) wsup[x] = 1

/* A terminal state is entered: counted, and at most once. */
#define FINALISE(j, s) \
	state[j] = s; \
	finals[j]++; \
	CHECK(terminal_once, finals[j] <= 1)

/* The effect of an outcome o on job j's row (the fence already passed).
 * leased_until is cleared. An operator's cancel request ends any attempt
 * cancelled (completion.sql); only the features' statements and the
 * rescue's reach a row with one, the kernel's refuse it (drover_watched). */
#define APPLY(j, o) \
	leased[j] = NOLEASE; \
	if \
	:: cancel_req[j] -> FINALISE(j, cancelled) \
	:: else -> \
		if \
		:: o == complete -> FINALISE(j, completed) \
		:: o == fail && attempt[j] >= MAXATT -> FINALISE(j, dead) \
		:: o == fail && attempt[j] < MAXATT -> state[j] = retryable \
		:: o == handback -> state[j] = retryable; HANDBACK_REFUND(j) \
		:: o == snooze -> state[j] = available; attempt[j]-- \
		fi \
	fi

#ifdef BUG_HANDBACK_REFUNDS
#define HANDBACK_REFUND(j) attempt[j]--
#else
#define HANDBACK_REFUND(j) skip
#endif

/* job_claim's effect on job j for worker w: a new attempt, a lease, and the
 * client's own lease (sent + lease) live. */
#ifdef BUG_CLAIM_NO_LEASE
#define CLAIM_LEASE NOLEASE
#else
#define CLAIM_LEASE LIVE
#endif
#define CLAIM(j) \
	CHECK(lease_exclusive, NOBODY_LIVE(j)); \
	EACH_HOLDER(j, SUPERSEDE); \
	state[j] = running; \
	attempt[j]++; \
	leased[j] = CLAIM_LEASE; \
	a = attempt[j]; \
	wjob[w] = j; \
	wlive[w] = 1; \
	wsup[w] = 0; \
	printf("MSC: worker %d claims job %d, attempt %d\n", w, j, a)

/* A worker's fenced outcome write: the kernel's statement (job_complete for a
 * plain completion, job_record otherwise), which refuses a watched job
 * (drover_watched: here, a cancel request); then, for a claim it refused, the
 * features' statement (job_complete_many, job_record_outcomes) in a statement
 * of its own. Each applies only while the claim is current. */
inline write(o) {
	/* step: write_kernel */
	d_step {
		wlive[w] = 0; /* the handler is done: its lease no longer matters */
		if
		:: FENCE(J, a) && !cancel_req[J] -> NOT_STALE; APPLY(J, o)
		:: FENCE(J, a) && cancel_req[J] -> again = 1
		:: else -> skip /* refused: the claim is stale */
		fi;
		printf("MSC: worker %d writes %e for job %d attempt %d: job %e, attempt %d\n",
			w, o, J, a, state[J], attempt[J])
	}
	/* end: write_kernel */
	if
	:: d_step { again && crashes < MAXCRASH -> crashes++; again = 0 } /* a crash in between */
	:: again ->
		/* step: write_watched */
		d_step {
			again = 0;
			if
			:: FENCE(J, a) -> NOT_STALE; APPLY(J, o)
			:: else -> skip
			fi;
			printf("MSC: worker %d writes %e (watched) for job %d attempt %d: job %e\n",
				w, o, J, a, state[J])
		}
		/* end: write_watched */
	:: else -> skip
	fi
}

/* Job.complete_tx: the handler's own transaction, with its effects and the
 * fenced completion (job_complete, then job_complete_many for a watched job)
 * in it. The completion locks the row until the transaction ends: every
 * other writer of the row skips it (claim, rescue, renewal: SKIP LOCKED) or
 * waits for it and then reads it again, so the transaction is one step. It
 * commits, or the handler's code rolls it back (nothing happens). A refusal
 * raises LeaseLost, which rolls the transaction back with the effects. */
#ifdef BUG_COMPLETE_TX_UNFENCED
#define TX_REFUSED effects[J]++ /* LeaseLost swallowed: the effects commit */
#else
#define TX_REFUSED skip
#endif
inline complete_tx() {
	if
	:: /* step: complete_tx */
	   d_step {
		if
		:: FENCE(J, a) -> NOT_STALE; effects[J]++; txdone[J] = 1; APPLY(J, complete)
		:: else -> TX_REFUSED
		fi;
		CHECK(effects_once, effects[J] <= 1 && effects[J] == txdone[J]);
		printf("MSC: worker %d commits complete_tx for job %d attempt %d: job %e, effects %d\n",
			w, J, a, state[J], effects[J])
	   }
	   /* end: complete_tx */
	:: skip /* the handler rolled its transaction back */
	fi
}

proctype Worker(byte w) {
	byte a;     /* the claim's attempt: its fence token */
	bit again;

idle:
	atomic { wjob[w] = NJ; wlive[w] = 0; wsup[w] = 0; a = 0 }
end_idle:
	/* step: claim */
	/* job_claim may also carry the completions of the worker's previous
	 * claims (ADR 0058): the outcome step below, then this one, in one
	 * atomic statement. That removes interleavings and adds none, so this
	 * model's two steps cover it. Floors (ADR 0059) only narrow which
	 * waiting job a claim may take, or let it take none for a while: both
	 * are choices this step already makes. */
	if
	:: d_step { WAITING(state[0]) -> CLAIM(0) }
	:: d_step { WAITING(state[1]) -> CLAIM(1) }
	fi;
	/* end: claim */

	do
	:: /* step: renew */
	   d_step {
		if
		:: FENCE(J, a) -> NOT_STALE; leased[J] = LIVE; wlive[w] = 1
		:: else -> wlive[w] = 0 /* lost: the job moved on */
		fi;
		printf("MSC: worker %d renews job %d attempt %d: renewed %d\n", w, J, a, wlive[w])
	   }
	   /* end: renew */
	:: SPEND(crashes, MAXCRASH); printf("MSC: worker %d crashes\n", w); goto idle
	:: break /* the handler returns or raises */
	od;

	if
	:: write(complete) /* or cancelled, or dead: an ending write */
	:: write(fail)
	:: SPEND(snoozes, MAXSNOOZE); write(snooze)
	:: complete_tx();
		/* then the completer writes a retry marked settles_tx: refused when
		 * the transaction committed, applied when it rolled back */
		if
		:: write(fail)
		:: SPEND(crashes, MAXCRASH)
		fi
	:: SPEND(shutdowns, MAXSHUT) ->
		/* the drain ran out: the lease given up, then the job handed back,
		 * the attempt kept; the handler may run on and try its own write */
		/* step: hand_back */
		wlive[w] = 0;
		printf("MSC: worker %d shuts down and hands job %d back\n", w, J);
		write(handback);
		/* end: hand_back */
		if
		:: skip
		:: write(complete)
		:: complete_tx()
		fi
	fi;
	goto idle
}

/* The lease clock: a live lease may pass its leased_until at any moment. A
 * client's own deadline (sent + lease) is never later than the row's: its
 * local lease has expired by then too. */
#define EXPIRE(j) \
	leased[j] = EXPIRED; \
	EACH_HOLDER(j, UNLIVE); \
	printf("MSC: job %d's lease expires\n", j)

active proctype Clock() {
end:
	/* step: expire */
	do
	:: d_step { leased[0] == LIVE -> EXPIRE(0) }
	:: d_step { leased[1] == LIVE -> EXPIRE(1) }
	od
	/* end: expire */
}

/* The rescuer's sweep: one transaction of job_claim_expired (the row
 * re-leased, same attempt) and the decided failure written with job_record
 * (job_record_outcomes for a watched job) while the row stays locked. */
#ifdef BUG_RESCUE_IGNORES_LEASE
#define RESCUABLE(j) (state[j] == running)
#else
#define RESCUABLE(j) (state[j] == running && leased[j] == EXPIRED)
#endif
#define RESCUE(j) \
	CHECK(lease_exclusive, NOBODY_LIVE(j)); \
	APPLY(j, fail); \
	printf("MSC: the rescuer rescues job %d attempt %d: job %e\n", j, attempt[j], state[j])

active proctype Rescuer() {
end:
	/* step: rescue */
	do
	:: d_step { RESCUABLE(0) -> RESCUE(0) }
	:: d_step { RESCUABLE(1) -> RESCUE(1) }
	od
	/* end: rescue */
}

/* An operator's cancel (job_cancel_or_request), once: a waiting job is
 * cancelled at once; a running one gets a cancel request, and whatever write
 * ends its attempt ends it cancelled. */
#define CANCEL(j) \
	if \
	:: WAITING(state[j]) -> leased[j] = NOLEASE; FINALISE(j, cancelled) \
	:: else -> cancel_req[j] = 1 \
	fi; \
	printf("MSC: an operator cancels job %d: job %e, request %d\n", j, state[j], cancel_req[j])

#if MAXCANCEL > 0
active proctype Operator() {
end:
	/* step: cancel */
	if
	:: d_step { (WAITING(state[0]) || state[0] == running) -> CANCEL(0) }
	:: d_step { (WAITING(state[1]) || state[1] == running) -> CANCEL(1) }
	fi
	/* end: cancel */
}
#endif

/* When nothing can move any more (every worker idle with nothing to claim, no
 * lease left to expire, nothing to rescue), every job is terminal, once. */
active proctype Quiescence() {
end:
	timeout ->
	d_step {
		CHECK(no_job_lost, TERMINAL(state[0]) && TERMINAL(state[1]));
		CHECK(terminal_once, finals[0] == 1 && finals[1] == 1);
		CHECK(effects_once, effects[0] == txdone[0] && effects[1] == txdone[1])
	}
}

init {
	byte i;
	atomic {
		for (i : 0 .. NW - 1) {
			wjob[i] = NJ
		}
		for (i : 0 .. NJ - 1) {
			state[i] = available
		}
		for (i : 0 .. NW - 1) {
			run Worker(i)
		}
	}
}

#endif /* KERNEL */

#ifdef LEADER

/* ---- the periodic leader's lease row (drover_periodic_lease) ------------ */

byte holder;            /* 0: no row; else the candidate + 1 */
bit term[NC];           /* ghost: candidate c holds a lease the database granted
                           that has not expired (the row's, or one taken over) */
bit leading[NC];        /* the candidate's ticker believes it leads */
bit fired;              /* the fire time's watermark (drover_periodic_ticks) */
byte ticks;             /* ghost: jobs inserted for that fire time (saturates) */

#if NC == 2
#define TERMS (term[0] + term[1])
#else
#define TERMS (term[0] + term[1] + term[2])
#endif

/* A client with a session leads by the advisory lock instead (-DSESSION_LEADER:
 * one such client beside the lease candidates). The lease is not taken while a
 * backend holds the lock; the lock's try does not look at the lease (ADR 0040). */
#ifdef SESSION_LEADER
bit lock;               /* the advisory lock is held (by the session client) */
#define LOCKS lock
#else
#define LOCKS 0
#endif

#ifdef BUG_LEADER_NO_EXPIRY_CHECK
#define MAY_TAKE(c) (!LOCKS)
#else
#define MAY_TAKE(c) (!LOCKS && (holder == 0 || holder == (c) + 1 || !term[holder - 1]))
#endif

/* The tick, in one transaction: the watermark moved past the fire time
 * (periodic_tick_claim) and the job inserted, or nothing if it had moved. */
#ifdef BUG_TICK_NO_WATERMARK
#define TICK if :: ticks < 2 -> ticks++ :: else -> skip fi
#else
#define TICK if :: !fired -> fired = 1; ticks++ :: else -> skip fi
#endif
#define FIRE_TICK \
	done = 1; \
	TICK; \
	CHECK(tick_once, ticks <= 1)

proctype Candidate(byte c) {
	bit done; /* its ticker fires the fire time at most once itself */
end:
	do
	:: /* step: lease_hold */
	   d_step {
		if
		:: MAY_TAKE(c) ->
			holder = c + 1;
			term[c] = 1;
			leading[c] = 1;
			CHECK(one_leader, TERMS + LOCKS <= 1)
		:: else -> leading[c] = 0 /* taken over: leadership lost */
		fi;
		printf("MSC: candidate %d holds the lease: leads %d (row holder %d)\n",
			c, leading[c], holder - 1)
	   }
	   /* end: lease_hold */
	:: leading[c] && !done ->
		/* step: fire_tick */
		d_step {
			FIRE_TICK;
			printf("MSC: candidate %d fires the tick: %d inserted\n", c, ticks)
		}
		/* end: fire_tick */
	:: leading[c] ->
		/* step: lease_release */
		d_step {
			if :: holder == c + 1 -> holder = 0 :: else -> skip fi;
			term[c] = 0;
			leading[c] = 0;
			printf("MSC: candidate %d stops and releases the lease\n", c)
		}
		/* end: lease_release */
	:: leading[c] -> leading[c] = 0; printf("MSC: candidate %d crashes\n", c) /* the row stays until it expires */
	od
}

active proctype LeaseClock() {
end:
	/* step: lease_expire */
	do
	:: d_step { term[0] -> term[0] = 0; printf("MSC: candidate 0's lease expires\n") }
	:: d_step { term[1] -> term[1] = 0; printf("MSC: candidate 1's lease expires\n") }
#if NC == 3
	:: d_step { term[2] -> term[2] = 0; printf("MSC: candidate 2's lease expires\n") }
#endif
	od
	/* end: lease_expire */
}

#ifdef SESSION_LEADER
active proctype SessionCandidate() {
	bit done;
end:
	do
	:: /* step: try_lock */
	   d_step {
		!lock -> lock = 1;
		CHECK(one_leader, TERMS + LOCKS <= 1);
		printf("MSC: the session client takes the advisory lock\n")
	   }
	   /* end: try_lock */
	:: lock && !done ->
		/* step: fire_tick */
		d_step {
			FIRE_TICK;
			printf("MSC: the session client fires the tick: %d inserted\n", ticks)
		}
		/* end: fire_tick */
	:: lock ->
		/* step: session_end */
		d_step { lock = 0; printf("MSC: the session client's session ends\n") }
		/* end: session_end */
	od
}
#endif

init {
	byte i;
	atomic {
		for (i : 0 .. NC - 1) {
			run Candidate(i)
		}
	}
}

#endif /* LEADER */
