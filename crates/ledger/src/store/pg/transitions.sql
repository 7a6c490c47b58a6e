-- hermes' hot transitions on PostgreSQL (schema version 4): each one a single statement, a call
-- of one of these functions in its own autocommit transaction at READ COMMITTED. Each locks the
-- event rows it decides on (`FOR UPDATE`: `hermes_ack` in (unit, code) order, so two of them
-- never wait on each other in a cycle; `hermes_claim` never waits at all: it locks only rows
-- it may take, skips one another transaction holds, `SKIP LOCKED`, and refuses that key as
-- busy), reads them as they are once locked, and writes only what the rule of `rules.rs`
-- says: `hermes_claim` is `rules::check_keys` then `rules::take` (or `rules::drop_event` for
-- keys whose attempts are used up), `hermes_ack` is `rules::standing` then `rules::ack`,
-- `hermes_publish` is `events::publish_in`. The Rust functions are the spec; the property
-- test `src/agree.rs` checks that these agree with them on random states.
-- The same shape as graphile-worker's `get_job`/`complete_job` and pgqueuer's dequeue: one
-- round trip per transition, row locks instead of serializable retries, NOTIFY by the write.
-- (`hermes_` names are qualified with the ledger's namespace when it has one.)
-- Every migration creates them anew (`CREATE OR REPLACE`, the same signatures): version 3 is
-- version 2's tables with the one-key fast paths; version 4 the same tables with a claim that
-- skips locked rows instead of waiting on them.

-- Every statement of these functions names an event by its primary key (never a join with
-- `unnest` of the keys): PL/pgSQL keeps generic plans, and a generic plan, not knowing how long
-- an array is, plans such a join as a scan of the whole table. Rows are returned by `RETURN
-- NEXT` from variables where the function has them, which runs no statement.

-- Publishes `task:N`/`terminal` of a unit once: `missing` (no such unit), `present` (already
-- published; nothing changes) or `inserted`. The event takes the unit's session and delivery
-- mode; it is recorded dropped (`session_ended`) when `p_ended_with_session` (its payload says
-- the session's end interrupted it) or the session has ended. (A pending event wakes its
-- session's consumers through `hermes_notify_event`.) One statement when it inserts.
CREATE OR REPLACE FUNCTION hermes_publish(
    p_unit text, p_code bigint, p_payload bytea, p_now bigint, p_ended_with_session boolean
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hermes_events AS e (unit, code, session, delivery, state, attempts,
            published_at, dropped_at, drop_reason, payload)
        SELECT p_unit, p_code, coalesce(u.session, ''), u.delivery,
            CASE WHEN d.dropped THEN 'dropped' ELSE 'pending' END, 0, p_now,
            CASE WHEN d.dropped THEN p_now END,
            CASE WHEN d.dropped THEN 'session_ended' END, p_payload
        FROM hermes_units u
        LEFT JOIN hermes_sessions s ON s.id = u.session
        CROSS JOIN LATERAL (SELECT p_ended_with_session OR coalesce(s.ended, false)) AS d(dropped)
        WHERE u.id = p_unit
        ON CONFLICT (unit, code) DO NOTHING;
    IF FOUND THEN
        RETURN 'inserted';
    END IF;
    PERFORM 1 FROM hermes_units u WHERE u.id = p_unit;
    RETURN CASE WHEN FOUND THEN 'present' ELSE 'missing' END;
END
$$;

-- Claims, for each request `r` (0-based), every key whose `p_req` is `r`, all or none, with the
-- token `p_tokens[r]` until `p_expires[r]`, for a consumer of `p_sessions[r]` (NULL: any). The
-- caller gives each request's keys together, in `p_req` order, each key once and in the
-- bytewise order of Rust's keys (the claim record keeps them so). One row per key of each
-- request, in that order, with its verdict: `claimed` (the request took every key), `ok`
-- (claimable, but another key of the request was refused), `missing`, `terminal`,
-- `not_owned`, `live` (another lease runs until `lease_expires_at`), `busy` (another
-- transaction holds the row's lock now, most likely a consumer claiming it: refused at once
-- rather than after that transaction, so racing consumers spread over the ready events as the
-- floor's `SKIP LOCKED` queue does) or `exhausted` (its attempts were used up: dropped now,
-- `attempts_exhausted`); and the event's columns as they are after the call (a busy key's as
-- last committed). Nothing here waits on a lock, so no two claims wait on each other.
CREATE OR REPLACE FUNCTION hermes_claim(
    p_req integer[], p_units text[], p_codes bigint[], p_sessions text[], p_consumers text[],
    p_tokens bytea[], p_expires bigint[], p_now bigint, p_max bigint
) RETURNS TABLE (
    o_req integer, o_verdict text, o_unit text, o_code bigint, o_session text,
    o_delivery text, o_state text, o_attempts bigint, o_lease_token bytea,
    o_lease_consumer text, o_lease_claimed_at bigint, o_lease_expires_at bigint,
    o_published_at bigint, o_delivered_at bigint, o_dropped_at bigint, o_drop_reason text,
    o_payload bytea
) LANGUAGE plpgsql AS $$
DECLARE
    r integer;
    j integer := 1;
    q integer;
    lo integer;
    n integer := coalesce(cardinality(p_units), 0);
    e record;
    v_verdicts text[];
    v_leases bytea[];
    v_verdict text;
    v_refused boolean;
    v_locked boolean;
BEGIN
    -- One request for one key that nobody holds, the common claim: the row locked unless
    -- another transaction holds it, then `rules::check_claim`'s tests in the `WHERE` of the
    -- update that takes it. Anything else (a refusal, an old lease to fence, a row held) takes
    -- the general path below, as if this had not run: it wrote nothing.
    IF cardinality(p_tokens) = 1 AND n = 1 THEN
        PERFORM 1 FROM hermes_events ev WHERE ev.unit = p_units[1] AND ev.code = p_codes[1]
            FOR UPDATE SKIP LOCKED;
    END IF;
    IF cardinality(p_tokens) = 1 AND n = 1 AND FOUND THEN
        UPDATE hermes_events ev SET state = 'claimed', attempts = ev.attempts + 1,
                lease_token = p_tokens[1], lease_consumer = p_consumers[1],
                lease_claimed_at = p_now, lease_expires_at = p_expires[1]
            WHERE ev.unit = p_units[1] AND ev.code = p_codes[1]
                AND ev.state NOT IN ('delivered', 'dropped')
                AND (p_sessions[1] IS NULL OR ev.session = p_sessions[1])
                AND ev.lease_token IS NULL
                AND (ev.lease_expires_at IS NULL OR ev.lease_expires_at <= p_now)
                AND ev.attempts < p_max
            RETURNING ev.session, ev.delivery, ev.state, ev.attempts, ev.lease_token,
                ev.lease_consumer, ev.lease_claimed_at, ev.lease_expires_at,
                ev.published_at, ev.delivered_at, ev.dropped_at, ev.drop_reason, ev.payload
            INTO o_session, o_delivery, o_state, o_attempts, o_lease_token, o_lease_consumer,
                o_lease_claimed_at, o_lease_expires_at, o_published_at, o_delivered_at,
                o_dropped_at, o_drop_reason, o_payload;
        IF FOUND THEN
            INSERT INTO hermes_claims (token, consumer, claimed_at, expires_at, units, codes)
                VALUES (p_tokens[1], p_consumers[1], p_now, p_expires[1], p_units, p_codes);
            o_req := 0;
            o_verdict := 'claimed';
            o_unit := p_units[1];
            o_code := p_codes[1];
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    FOR r IN 0 .. coalesce(cardinality(p_tokens), 0) - 1 LOOP
        lo := j;
        v_verdicts := '{}';
        v_leases := '{}';
        v_refused := false;
        -- `rules::check_keys`: every key checked as `rules::check_claim` does, first as last
        -- committed and without a lock: a key refused for what it is there (missing, final,
        -- another session's, held by a live lease) is refused so, and locks nothing that its
        -- holder's ack would then wait for. A key that could be taken (or dropped: its attempts
        -- are used up) is locked, or refused as busy when another transaction holds it, and
        -- checked again as it is once locked.
        WHILE j <= n AND p_req[j] = r LOOP
            v_locked := false;
            LOOP
                IF v_locked THEN
                    SELECT ev.state, ev.session, ev.attempts, ev.lease_token,
                            ev.lease_expires_at
                        INTO e FROM hermes_events ev
                        WHERE ev.unit = p_units[j] AND ev.code = p_codes[j]
                        FOR UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        v_verdict := 'busy';
                        EXIT;
                    END IF;
                ELSE
                    SELECT ev.state, ev.session, ev.attempts, ev.lease_token,
                            ev.lease_expires_at
                        INTO e FROM hermes_events ev
                        WHERE ev.unit = p_units[j] AND ev.code = p_codes[j];
                    IF NOT FOUND THEN
                        v_verdict := 'missing';
                        EXIT;
                    END IF;
                END IF;
                IF e.state IN ('delivered', 'dropped') THEN
                    v_verdict := 'terminal';
                ELSIF p_sessions[r + 1] IS NOT NULL AND e.session <> p_sessions[r + 1] THEN
                    v_verdict := 'not_owned';
                ELSIF e.lease_expires_at IS NOT NULL AND e.lease_expires_at > p_now THEN
                    v_verdict := 'live';
                ELSIF e.attempts >= p_max THEN
                    v_verdict := 'exhausted';
                ELSE
                    v_verdict := 'ok';
                END IF;
                EXIT WHEN v_locked OR v_verdict NOT IN ('ok', 'exhausted');
                v_locked := true;
            END LOOP;
            v_refused := v_refused OR v_verdict <> 'ok';
            v_verdicts := v_verdicts || v_verdict;
            v_leases := v_leases || CASE WHEN v_verdict NOT IN ('missing', 'busy') THEN e.lease_token END;
            j := j + 1;
        END LOOP;
        IF v_refused THEN
            -- Refused: only the keys whose attempts are used up change (`rules::drop_event`),
            -- their old holders' claim records going with their leases.
            FOR q IN lo .. j - 1 LOOP
                IF v_verdicts[q - lo + 1] = 'exhausted' THEN
                    DELETE FROM hermes_claims c WHERE c.token = v_leases[q - lo + 1];
                    UPDATE hermes_events ev SET state = 'dropped', lease_token = NULL,
                            lease_consumer = NULL, lease_claimed_at = NULL,
                            lease_expires_at = NULL, dropped_at = p_now,
                            drop_reason = 'attempts_exhausted'
                        WHERE ev.unit = p_units[q] AND ev.code = p_codes[q];
                END IF;
                RETURN QUERY SELECT r, v_verdicts[q - lo + 1], p_units[q], p_codes[q],
                        ev.session, ev.delivery, ev.state, ev.attempts, ev.lease_token,
                        ev.lease_consumer, ev.lease_claimed_at, ev.lease_expires_at,
                        ev.published_at, ev.delivered_at, ev.dropped_at, ev.drop_reason,
                        NULL::bytea
                    FROM (SELECT) AS one
                    LEFT JOIN hermes_events ev ON ev.unit = p_units[q] AND ev.code = p_codes[q];
            END LOOP;
        ELSE
            -- `rules::take`: claimed, one more attempt, the new lease replacing the old one,
            -- whose holder is fenced out (its claim record goes).
            IF cardinality(array_remove(v_leases, NULL)) > 0 THEN
                DELETE FROM hermes_claims c WHERE c.token = ANY (v_leases);
            END IF;
            INSERT INTO hermes_claims (token, consumer, claimed_at, expires_at, units, codes)
                VALUES (p_tokens[r + 1], p_consumers[r + 1], p_now, p_expires[r + 1],
                    p_units[lo:j - 1], p_codes[lo:j - 1]);
            FOR q IN lo .. j - 1 LOOP
                UPDATE hermes_events ev SET state = 'claimed', attempts = ev.attempts + 1,
                        lease_token = p_tokens[r + 1], lease_consumer = p_consumers[r + 1],
                        lease_claimed_at = p_now, lease_expires_at = p_expires[r + 1]
                    WHERE ev.unit = p_units[q] AND ev.code = p_codes[q]
                    RETURNING ev.session, ev.delivery, ev.state, ev.attempts, ev.lease_token,
                        ev.lease_consumer, ev.lease_claimed_at, ev.lease_expires_at,
                        ev.published_at, ev.delivered_at, ev.dropped_at, ev.drop_reason,
                        ev.payload
                    INTO o_session, o_delivery, o_state, o_attempts, o_lease_token,
                        o_lease_consumer, o_lease_claimed_at, o_lease_expires_at,
                        o_published_at, o_delivered_at, o_dropped_at, o_drop_reason, o_payload;
                o_req := r;
                o_verdict := 'claimed';
                o_unit := p_units[q];
                o_code := p_codes[q];
                RETURN NEXT;
            END LOOP;
        END IF;
    END LOOP;
END
$$;

-- Acks each claim of `p_tokens`: one row per token `i` (0-based) with where it stood
-- (`rules::standing`: `holds` — acked now, every key delivered at `p_now` —, `acked` — this
-- token had acked every key already: nothing changes —, `lost`, or `missing`: no claim record)
-- and its lease's end (`NULL` when missing), then (for `holds` and `acked`) one row per key,
-- `o_i` the same, `o_unit`/`o_code` set.
CREATE OR REPLACE FUNCTION hermes_ack(p_tokens bytea[], p_now bigint)
RETURNS TABLE (o_i integer, o_standing text, o_expires_at bigint, o_unit text, o_code bigint)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    j integer;
    k record;
    c record;
    v_state text;
    v_token bytea;
    v_n integer;
    v_keys integer;
    v_held integer;
    v_acked integer;
    v_recorded boolean;
BEGIN
    -- Several tokens: every key of every claim named is locked first, in one order. One
    -- claim's keys are in that order in its record: each is locked as it is read.
    IF cardinality(p_tokens) > 1 THEN
        FOR k IN SELECT DISTINCT t.u COLLATE "C" AS u, t.c AS c
                FROM hermes_claims cl, unnest(cl.units, cl.codes) AS t(u, c)
                WHERE cl.token = ANY (p_tokens) ORDER BY 1, 2 LOOP
            PERFORM 1 FROM hermes_events ev WHERE ev.unit = k.u AND ev.code = k.c FOR UPDATE;
        END LOOP;
    END IF;
    FOR i IN 0 .. coalesce(cardinality(p_tokens), 0) - 1 LOOP
        o_i := i;
        o_unit := NULL;
        o_code := NULL;
        SELECT cl.units, cl.codes, cl.expires_at INTO c
            FROM hermes_claims cl WHERE cl.token = p_tokens[i + 1];
        v_recorded := FOUND;
        -- A claim of one key still held, the common ack: delivered by the update that finds it
        -- held (`rules::standing` then `rules::ack`). Otherwise nothing was written, and the
        -- general path below decides.
        IF v_recorded AND cardinality(c.units) = 1 THEN
            UPDATE hermes_events ev SET state = 'delivered', delivered_at = p_now
                WHERE ev.unit = c.units[1] AND ev.code = c.codes[1]
                    AND ev.lease_token = p_tokens[i + 1] AND ev.state = 'claimed';
            IF FOUND THEN
                o_standing := 'holds';
                o_expires_at := c.expires_at;
                RETURN NEXT;
                o_standing := NULL;
                o_expires_at := NULL;
                o_unit := c.units[1];
                o_code := c.codes[1];
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        IF v_recorded THEN
            v_n := cardinality(c.units);
            v_keys := 0;
            v_held := 0;
            v_acked := 0;
            FOR j IN 1 .. v_n LOOP
                SELECT ev.state, ev.lease_token INTO v_state, v_token FROM hermes_events ev
                    WHERE ev.unit = c.units[j] AND ev.code = c.codes[j] FOR UPDATE;
                IF FOUND THEN
                    v_keys := v_keys + 1;
                    IF v_token = p_tokens[i + 1] AND v_state = 'claimed' THEN
                        v_held := v_held + 1;
                    ELSIF v_token = p_tokens[i + 1] AND v_state = 'delivered' THEN
                        v_acked := v_acked + 1;
                    END IF;
                END IF;
            END LOOP;
            -- A claim that took these keys over between the record's read and their locks
            -- removed the record: unless every key is still held, it is read again.
            IF NOT (v_keys = v_n AND v_held = v_n) THEN
                PERFORM 1 FROM hermes_claims cl WHERE cl.token = p_tokens[i + 1];
                v_recorded := FOUND;
            END IF;
        END IF;
        IF NOT v_recorded THEN
            o_standing := 'missing';
            o_expires_at := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        o_expires_at := c.expires_at;
        IF v_keys = v_n AND v_held = v_n THEN
            FOR j IN 1 .. v_n LOOP
                UPDATE hermes_events ev SET state = 'delivered', delivered_at = p_now
                    WHERE ev.unit = c.units[j] AND ev.code = c.codes[j];
            END LOOP;
            o_standing := 'holds';
        ELSIF v_keys = v_n AND v_keys > 0 AND v_acked = v_keys THEN
            o_standing := 'acked';
        ELSE
            o_standing := 'lost';
            RETURN NEXT;
            CONTINUE;
        END IF;
        RETURN NEXT;
        o_standing := NULL;
        o_expires_at := NULL;
        FOR j IN 1 .. v_n LOOP
            o_unit := c.units[j];
            o_code := c.codes[j];
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;

-- Reads that bring a unit's host along (through the unit's host columns), and its child, or
-- its tally and session: what a child's start and finish check next (`read.rs`). Functions
-- because their plans are kept per connection: the same joins as plain statements were
-- planned again on every call, at three to five times a one-table read's planning.

-- The unit and its host's record (NULL: none).
CREATE OR REPLACE FUNCTION hermes_read_unit(p_unit text)
RETURNS TABLE (o_unit bytea, o_host bytea) LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT u.record, h.record FROM hermes_units u
        LEFT JOIN hermes_hosts h ON h.pid = u.host_pid AND h.start_time = u.host_start
        WHERE u.id = p_unit;
END
$$;

-- Child `p_idx` of the unit (NULL: none), the unit and its host's record; no row without the
-- unit.
CREATE OR REPLACE FUNCTION hermes_read_child(p_unit text, p_idx bigint)
RETURNS TABLE (o_child bytea, o_unit bytea, o_host bytea) LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT c.record, u.record, h.record FROM hermes_units u
        LEFT JOIN hermes_children c ON c.unit = u.id AND c.idx = p_idx
        LEFT JOIN hermes_hosts h ON h.pid = u.host_pid AND h.start_time = u.host_start
        WHERE u.id = p_unit;
END
$$;

-- The unit's tally; when it has none, the unit, its host's and its session's records.
CREATE OR REPLACE FUNCTION hermes_read_tally(p_unit text)
RETURNS TABLE (o_tally bytea, o_unit bytea, o_host bytea, o_session bytea)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT t.record INTO o_tally FROM hermes_tallies t WHERE t.unit = p_unit;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT NULL::bytea, u.record, h.record, s.record FROM hermes_units u
        LEFT JOIN hermes_hosts h ON h.pid = u.host_pid AND h.start_time = u.host_start
        LEFT JOIN hermes_sessions s ON s.id = u.session
        WHERE u.id = p_unit;
    IF NOT FOUND THEN
        RETURN NEXT;
    END IF;
END
$$;

-- NOTIFY issued by the write: an event written pending (published, released, deferred) wakes
-- its session's consumers, on the channel the trigger was created with (`TG_ARGV[0]`, the
-- namespace's), with the session as payload; the server sends it when the transaction commits,
-- once per channel and payload whatever the number of rows.
CREATE OR REPLACE FUNCTION hermes_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.session);
    RETURN NULL;
END
$$;

-- And the activity counter's moves wake every host polling it (`TG_ARGV[0]`: its channel).
CREATE OR REPLACE FUNCTION hermes_notify_activity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$$;
