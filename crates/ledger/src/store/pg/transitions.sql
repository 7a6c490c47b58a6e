-- hermes' hot transitions on PostgreSQL (schema version 2): each one a single statement, a call
-- of one of these functions in its own autocommit transaction at READ COMMITTED. Each locks the
-- event rows it decides on (`FOR UPDATE`, in (unit, code) order, so two of them never wait on
-- each other in a cycle), reads them as they are once locked, and writes only what the rule of
-- `rules.rs` says: `hermes_claim` is `rules::check_keys` then `rules::take` (or
-- `rules::drop_event` for keys whose attempts are used up), `hermes_ack` is `rules::standing`
-- then `rules::ack`, `hermes_publish` is `events::publish_in`. The Rust functions are the spec;
-- the property test `src/agree.rs` checks that these agree with them on random states.
-- The same shape as graphile-worker's `get_job`/`complete_job` and pgqueuer's dequeue: one
-- round trip per transition, row locks instead of serializable retries, NOTIFY by the write.
-- (`hermes_` names are qualified with the ledger's namespace when it has one.)

-- Publishes `task:N`/`terminal` of a unit once: `missing` (no such unit), `present` (already
-- published; nothing changes) or `inserted`. The event takes the unit's session and delivery
-- mode; it is recorded dropped (`session_ended`) when `p_ended_with_session` (its payload says
-- the session's end interrupted it) or the session has ended. (A pending event wakes its
-- session's consumers through `hermes_notify_event`.)
CREATE FUNCTION hermes_publish(
    p_unit text, p_code bigint, p_payload bytea, p_now bigint, p_ended_with_session boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_session text;
    v_delivery text;
    v_dropped boolean;
BEGIN
    SELECT coalesce(u.session, ''), u.delivery INTO v_session, v_delivery
        FROM hermes_units u WHERE u.id = p_unit;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    v_dropped := p_ended_with_session OR EXISTS (
        SELECT 1 FROM hermes_sessions s WHERE s.id = v_session AND s.ended);
    INSERT INTO hermes_events AS e (unit, code, session, delivery, state, attempts,
            published_at, dropped_at, drop_reason, payload)
        VALUES (p_unit, p_code, v_session, v_delivery,
            CASE WHEN v_dropped THEN 'dropped' ELSE 'pending' END, 0, p_now,
            CASE WHEN v_dropped THEN p_now END,
            CASE WHEN v_dropped THEN 'session_ended' END, p_payload)
        ON CONFLICT (unit, code) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'present';
    END IF;
    RETURN 'inserted';
END
$$;

-- Claims, for each request `r` (0-based), every key whose `p_req` is `r`, all or none, with the
-- token `p_tokens[r]` until `p_expires[r]`, for a consumer of `p_sessions[r]` (NULL: any). One
-- row per key of each request, in (unit, code) order, with its verdict: `claimed` (the request
-- took every key), `ok` (claimable, but another key of the request was refused), `missing`,
-- `terminal`, `not_owned`, `live` (another lease runs until `lease_expires_at`) or `exhausted`
-- (its attempts were used up: dropped now, `attempts_exhausted`); and the event's columns as
-- they are after the call.
CREATE FUNCTION hermes_claim(
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
    k record;
    e record;
    v_units text[];
    v_codes bigint[];
    v_verdicts text[];
    v_verdict text;
    v_refused boolean;
BEGIN
    -- Every key of every request, locked in one order.
    PERFORM 1 FROM hermes_events ev
        WHERE (ev.unit, ev.code) IN (SELECT t.u, t.c FROM unnest(p_units, p_codes) AS t(u, c))
        ORDER BY ev.unit, ev.code FOR UPDATE;
    FOR r IN 0 .. coalesce(array_length(p_tokens, 1), 0) - 1 LOOP
        v_units := '{}';
        v_codes := '{}';
        v_verdicts := '{}';
        v_refused := false;
        -- `rules::check_keys`: every key checked as `rules::check_claim` does, in the
        -- bytewise order of Rust's keys (the claim record keeps them so).
        FOR k IN SELECT DISTINCT t.u COLLATE "C" AS u, t.c AS c
                FROM unnest(p_req, p_units, p_codes) AS t(q, u, c)
                WHERE t.q = r ORDER BY 1, 2 LOOP
            SELECT ev.state, ev.session, ev.attempts, ev.lease_expires_at INTO e
                FROM hermes_events ev WHERE ev.unit = k.u AND ev.code = k.c;
            IF NOT FOUND THEN
                v_verdict := 'missing';
            ELSIF e.state IN ('delivered', 'dropped') THEN
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
            v_refused := v_refused OR v_verdict <> 'ok';
            v_units := v_units || k.u;
            v_codes := v_codes || k.c;
            v_verdicts := v_verdicts || v_verdict;
        END LOOP;
        IF v_refused THEN
            -- Refused: only the keys whose attempts are used up change (`rules::drop_event`),
            -- their old holders' claim records going with their leases.
            DELETE FROM hermes_claims c USING hermes_events ev,
                    unnest(v_units, v_codes, v_verdicts) AS t(u, c, v)
                WHERE t.v = 'exhausted' AND ev.unit = t.u AND ev.code = t.c
                    AND c.token = ev.lease_token;
            UPDATE hermes_events ev SET state = 'dropped', lease_token = NULL,
                    lease_consumer = NULL, lease_claimed_at = NULL, lease_expires_at = NULL,
                    dropped_at = p_now, drop_reason = 'attempts_exhausted'
                FROM unnest(v_units, v_codes, v_verdicts) AS t(u, c, v)
                WHERE t.v = 'exhausted' AND ev.unit = t.u AND ev.code = t.c;
        ELSE
            -- `rules::take`: claimed, one more attempt, the new lease replacing the old one,
            -- whose holder is fenced out (its claim record goes).
            DELETE FROM hermes_claims c USING hermes_events ev,
                    unnest(v_units, v_codes) AS t(u, c)
                WHERE ev.unit = t.u AND ev.code = t.c AND c.token = ev.lease_token;
            UPDATE hermes_events ev SET state = 'claimed', attempts = ev.attempts + 1,
                    lease_token = p_tokens[r + 1], lease_consumer = p_consumers[r + 1],
                    lease_claimed_at = p_now, lease_expires_at = p_expires[r + 1]
                FROM unnest(v_units, v_codes) AS t(u, c)
                WHERE ev.unit = t.u AND ev.code = t.c;
            INSERT INTO hermes_claims (token, consumer, claimed_at, expires_at, units, codes)
                VALUES (p_tokens[r + 1], p_consumers[r + 1], p_now, p_expires[r + 1],
                    v_units, v_codes);
            v_verdicts := array_fill('claimed'::text, ARRAY[cardinality(v_units)]);
        END IF;
        RETURN QUERY SELECT r, t.v, t.u, t.c, ev.session, ev.delivery, ev.state, ev.attempts,
                ev.lease_token, ev.lease_consumer, ev.lease_claimed_at, ev.lease_expires_at,
                ev.published_at, ev.delivered_at, ev.dropped_at, ev.drop_reason,
                CASE WHEN t.v = 'claimed' THEN ev.payload END
            FROM unnest(v_units, v_codes, v_verdicts) WITH ORDINALITY AS t(u, c, v, n)
            LEFT JOIN hermes_events ev ON ev.unit = t.u AND ev.code = t.c
            ORDER BY t.n;
    END LOOP;
END
$$;

-- Acks each claim of `p_tokens`: one row per token `i` (0-based) with where it stood
-- (`rules::standing`: `holds` — acked now, every key delivered at `p_now` —, `acked` — this
-- token had acked every key already: nothing changes —, `lost`, or `missing`: no claim record)
-- and its lease's end (`NULL` when missing), then (for `holds` and `acked`) one row per key,
-- `o_i` the same, `o_unit`/`o_code` set.
CREATE FUNCTION hermes_ack(p_tokens bytea[], p_now bigint)
RETURNS TABLE (o_i integer, o_standing text, o_expires_at bigint, o_unit text, o_code bigint)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    c record;
    v_keys integer;
    v_held integer;
    v_acked integer;
BEGIN
    -- Every key of every claim named, locked in one order.
    PERFORM 1 FROM hermes_events ev, hermes_claims cl,
            unnest(cl.units, cl.codes) AS t(u, c)
        WHERE cl.token = ANY (p_tokens) AND ev.unit = t.u AND ev.code = t.c
        ORDER BY ev.unit, ev.code FOR UPDATE OF ev;
    FOR i IN 0 .. coalesce(array_length(p_tokens, 1), 0) - 1 LOOP
        SELECT cl.units, cl.codes, cl.expires_at INTO c
            FROM hermes_claims cl WHERE cl.token = p_tokens[i + 1];
        IF NOT FOUND THEN
            RETURN QUERY SELECT i, 'missing'::text, NULL::bigint, NULL::text, NULL::bigint;
            CONTINUE;
        END IF;
        SELECT count(*),
                count(*) FILTER (WHERE ev.state = 'claimed'
                    AND ev.lease_token = p_tokens[i + 1]),
                count(*) FILTER (WHERE ev.state = 'delivered'
                    AND ev.lease_token = p_tokens[i + 1])
            INTO v_keys, v_held, v_acked
            FROM unnest(c.units, c.codes) AS t(u, c)
            JOIN hermes_events ev ON ev.unit = t.u AND ev.code = t.c;
        IF v_keys = cardinality(c.units) AND v_held = v_keys THEN
            UPDATE hermes_events ev SET state = 'delivered', delivered_at = p_now
                FROM unnest(c.units, c.codes) AS t(u, c)
                WHERE ev.unit = t.u AND ev.code = t.c;
            RETURN QUERY SELECT i, 'holds'::text, c.expires_at, NULL::text, NULL::bigint;
        ELSIF v_keys = cardinality(c.units) AND v_keys > 0 AND v_acked = v_keys THEN
            RETURN QUERY SELECT i, 'acked'::text, c.expires_at, NULL::text, NULL::bigint;
        ELSE
            RETURN QUERY SELECT i, 'lost'::text, c.expires_at, NULL::text, NULL::bigint;
            CONTINUE;
        END IF;
        RETURN QUERY SELECT i, NULL::text, NULL::bigint, t.u, t.c
            FROM unnest(c.units, c.codes) WITH ORDINALITY AS t(u, c, n) ORDER BY t.n;
    END LOOP;
END
$$;

-- NOTIFY issued by the write: an event written pending (published, released, deferred) wakes
-- its session's consumers, on the channel the trigger was created with (`TG_ARGV[0]`, the
-- namespace's), with the session as payload; the server sends it when the transaction commits,
-- once per channel and payload whatever the number of rows.
CREATE FUNCTION hermes_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.session);
    RETURN NULL;
END
$$;

-- And the activity counter's moves wake every host polling it (`TG_ARGV[0]`: its channel).
CREATE FUNCTION hermes_notify_activity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$$;
