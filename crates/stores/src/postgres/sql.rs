//! The schema's migrations and every statement the store runs: each call is one statement.

use deadpool_postgres::Pool;

use super::error::PgError;

/// The first key of the advisory lock taken while migrating the schema (`flk\x01`); the
/// locks on resources use `flk\x00` (see [`lock_resource!`]), purging `flk\x02`, and the
/// locks on semaphores and read-write locks `flk\x03` (see `fencelock_lock_name` in
/// migration 2). All are two-key advisory locks, a key space apart from one-key ones, chosen
/// so as not to meet other applications' advisory locks in the same database.
const MIGRATION_LOCK_CLASS: i32 = 0x666c_6b01;

/// The schema, one step per version; step `i` brings the schema to version `i + 1`. Steps
/// are only ever appended, never edited, since databases already at a version skip them.
const MIGRATIONS: &[&str] = &[
    // 1: the leases, and the sequence of fencing tokens that outlives them.
    r#"
    CREATE TABLE fencelock_leases (
        -- "C" collation: names compare and sort by their bytes, as the SPEC asks.
        resource    text COLLATE "C" PRIMARY KEY,
        owner       text NOT NULL,
        token       bigint NOT NULL CHECK (token > 0),
        acquired_at timestamptz NOT NULL,
        expires_at  timestamptz NOT NULL
    );
    CREATE INDEX fencelock_leases_expires_at ON fencelock_leases (expires_at);
    CREATE SEQUENCE fencelock_tokens AS bigint MINVALUE 1 NO CYCLE;
    "#,
    // 2: semaphores and read-write locks. A hold is a row whose token comes from the same
    // sequence as the leases'; the functions that change holds are here too (see
    // "Semaphores and read-write locks" in the module docs for why they are functions).
    r#"
    CREATE TABLE fencelock_holds (
        kind        text NOT NULL CHECK (kind IN ('semaphore', 'rwlock')),
        -- "C" collation: names compare and sort by their bytes, as the SPEC asks.
        name        text COLLATE "C" NOT NULL,
        owner       text NOT NULL,
        claim       text NOT NULL CHECK (claim IN ('permit', 'read', 'write')),
        -- A permit carries the limit of its semaphore; a read or write hold has none.
        lim         bigint CHECK (lim >= 1),
        token       bigint NOT NULL CHECK (token > 0),
        acquired_at timestamptz NOT NULL,
        expires_at  timestamptz NOT NULL,
        -- An owner holds at most one permit or hold of a name.
        PRIMARY KEY (kind, name, owner),
        CHECK ((kind = 'semaphore') = (claim = 'permit')),
        CHECK ((claim = 'permit') = (lim IS NOT NULL))
    );
    CREATE INDEX fencelock_holds_expires_at ON fencelock_holds (expires_at);

    -- Writers waiting for a read-write lock of this name: readers arriving after them are
    -- refused until they are granted, withdraw, or stop renewing their intent.
    CREATE TABLE fencelock_intents (
        name       text COLLATE "C" NOT NULL,
        owner      text NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (name, owner)
    );
    CREATE INDEX fencelock_intents_expires_at ON fencelock_intents (expires_at);

    -- Takes the advisory lock of one semaphore or read-write lock (first key 0x666c6b03,
    -- `flk\x03`; the second a hash of `kind:name`) until the transaction ends, and returns the
    -- database's time once it has it (`clock`), and that time rounded up to a whole millisecond
    -- (`stamp`, what new times are counted from, so that a hold never lasts less than asked).
    --
    -- Every function below starts with it, and only reads and writes holds and intents in
    -- the statements after it: in READ COMMITTED each of those takes a new snapshot, which
    -- shows everything committed before the lock was granted. A single statement could not:
    -- its snapshot is taken before the lock inside it is granted, so it could count permits
    -- without those granted meanwhile. In another isolation level every statement would see
    -- the transaction's first snapshot, so the functions refuse to run there.
    CREATE FUNCTION fencelock_lock_name(p_kind text, p_name text, OUT clock timestamptz, OUT stamp timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'fencelock needs the READ COMMITTED isolation level, not %',
                current_setting('transaction_isolation');
        END IF;
        PERFORM pg_advisory_xact_lock(1718381315, hashtext(p_kind || ':' || p_name));
        clock := clock_timestamp();
        stamp := date_trunc('milliseconds', clock + interval '999 microseconds');
    END
    $$;

    -- Acquire of a hold, as `fencelock_core::hold::judge` decides it: `p_claim` is 'permit'
    -- (with the semaphore's limit `p_lim`), 'read' or 'write'; `p_intent_ms`, if not NULL,
    -- records (or renews) a refused writer's intent for that long. Rows by `role`:
    -- 'granted' (the new hold) and 'replaced' (the owner's hold it replaced, if any);
    -- 'extended'; 'busy' (`writer_waits`, `retry_in_ms`) and one 'holder' per live hold of
    -- another owner; 'mismatch' (the live permits' limit in `lim`). Every change that may
    -- let a waiter in is announced on `fencelock_hold_released` as `kind:name`.
    CREATE FUNCTION fencelock_acquire_hold(
        p_name text, p_owner text, p_claim text, p_lim bigint, p_ttl_ms bigint, p_intent_ms bigint
    ) RETURNS TABLE (
        role text, writer_waits boolean, retry_in_ms bigint,
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        claim text, lim bigint
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_kind text := CASE WHEN p_claim = 'permit' THEN 'semaphore' ELSE 'rwlock' END;
        v_ttl interval := p_ttl_ms * interval '1 millisecond';
        v_now timestamptz;
        v_stamp timestamptz;
        v_own fencelock_holds%ROWTYPE;
        v_holding boolean;
        v_theirs bigint;
        v_others bigint;
        v_verdict text;
        -- Busy: the earliest end of a hold, and of another writer's intent, in the way.
        v_end timestamptz;
        v_intent_end timestamptz;
        v_new fencelock_holds%ROWTYPE;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(v_kind, p_name) l;
        SELECT h.* INTO v_own FROM fencelock_holds h
        WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner AND h.expires_at > v_now;
        v_holding := FOUND;

        IF p_claim = 'permit' THEN
            -- The live permits carry the semaphore's limit; another one changes nothing.
            SELECT h.lim INTO v_theirs FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name AND h.expires_at > v_now AND h.lim <> p_lim
            ORDER BY h.token LIMIT 1;
            IF FOUND THEN
                RETURN QUERY SELECT 'mismatch', NULL::boolean, NULL::bigint, NULL::text,
                    NULL::bigint, NULL::timestamptz, NULL::timestamptz, NULL::text, v_theirs;
                RETURN;
            END IF;
            IF v_holding THEN
                v_verdict := 'extend';
            ELSE
                SELECT count(*), min(h.expires_at) INTO v_others, v_end FROM fencelock_holds h
                WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
                  AND h.expires_at > v_now;
                v_verdict := CASE WHEN v_others < p_lim THEN 'grant' ELSE 'busy' END;
            END IF;
        ELSIF p_claim = 'read' THEN
            IF v_holding THEN
                -- A writer's read is a downgrade, at once.
                v_verdict := CASE WHEN v_own.claim = 'read' THEN 'extend' ELSE 'grant' END;
            ELSE
                SELECT min(h.expires_at) INTO v_end FROM fencelock_holds h
                WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
                  AND h.expires_at > v_now AND h.claim = 'write';
                -- A new reader waits behind another owner's waiting writer.
                SELECT min(i.expires_at) INTO v_intent_end FROM fencelock_intents i
                WHERE i.name = p_name AND i.owner <> p_owner AND i.expires_at > v_now;
                v_end := least(v_end, v_intent_end);
                v_verdict := CASE WHEN v_end IS NULL THEN 'grant' ELSE 'busy' END;
            END IF;
        ELSIF v_holding AND v_own.claim = 'write' THEN
            v_verdict := 'extend';
        ELSE
            -- A write: granted when no other owner holds anything (the owner's own read
            -- hold is then upgraded).
            SELECT min(h.expires_at) INTO v_end FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
              AND h.expires_at > v_now;
            v_verdict := CASE WHEN v_end IS NULL THEN 'grant' ELSE 'busy' END;
        END IF;

        IF v_verdict = 'busy' THEN
            IF p_claim = 'write' AND p_intent_ms IS NOT NULL THEN
                INSERT INTO fencelock_intents AS i (name, owner, expires_at)
                VALUES (p_name, p_owner, v_stamp + p_intent_ms * interval '1 millisecond')
                ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
            END IF;
            RETURN QUERY SELECT 'busy', v_intent_end IS NOT NULL,
                coalesce(ceil(extract(epoch FROM v_end - v_now) * 1000)::bigint, 0),
                NULL::text, NULL::bigint, NULL::timestamptz, NULL::timestamptz, NULL::text,
                NULL::bigint;
            RETURN QUERY SELECT 'holder', NULL::boolean, NULL::bigint,
                h.owner, h.token, h.acquired_at, h.expires_at, h.claim, h.lim
            FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
              AND h.expires_at > v_now
            ORDER BY h.token;
            RETURN;
        END IF;

        IF v_verdict = 'extend' THEN
            UPDATE fencelock_holds h SET acquired_at = v_stamp, expires_at = v_stamp + v_ttl
            WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner
            RETURNING h.* INTO v_new;
            IF v_new.expires_at < v_own.expires_at THEN
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
            END IF;
        ELSE
            -- The token is drawn under the name's lock, so that holds of one name are
            -- written in the order of their tokens. The row of the owner's expired or
            -- replaced hold, if any, becomes the new hold.
            INSERT INTO fencelock_holds AS h
                (kind, name, owner, claim, lim, token, acquired_at, expires_at)
            VALUES (v_kind, p_name, p_owner, p_claim,
                    CASE WHEN p_claim = 'permit' THEN p_lim END,
                    nextval('fencelock_tokens'), v_stamp, v_stamp + v_ttl)
            ON CONFLICT (kind, name, owner) DO UPDATE SET
                claim = EXCLUDED.claim, lim = EXCLUDED.lim, token = EXCLUDED.token,
                acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
            RETURNING h.* INTO v_new;
            IF v_holding THEN
                -- An upgrade or a downgrade: what the old hold kept out may now get in.
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
                RETURN QUERY SELECT 'replaced', NULL::boolean, NULL::bigint, v_own.owner,
                    v_own.token, v_own.acquired_at, v_own.expires_at, v_own.claim, v_own.lim;
            END IF;
        END IF;
        IF p_claim = 'write' THEN
            -- A writer granted no longer waits.
            DELETE FROM fencelock_intents i WHERE i.name = p_name AND i.owner = p_owner;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
            END IF;
        END IF;
        RETURN QUERY SELECT CASE WHEN v_verdict = 'extend' THEN 'extended' ELSE 'granted' END,
            NULL::boolean, NULL::bigint, v_new.owner, v_new.token, v_new.acquired_at,
            v_new.expires_at, v_new.claim, v_new.lim;
    END
    $$;

    -- Release of the owner's live hold. No row: it has none. Else one row: the hold, the
    -- verdict (2 another token, 3 released) and the database's time of the release.
    CREATE FUNCTION fencelock_release_hold(p_kind text, p_name text, p_owner text, p_token bigint)
    RETURNS TABLE (
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        verdict integer, ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_now timestamptz;
        v_stamp timestamptz;
        v_own fencelock_holds%ROWTYPE;
        v_allowed boolean;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(p_kind, p_name) l;
        SELECT h.* INTO v_own FROM fencelock_holds h
        WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner AND h.expires_at > v_now;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_allowed := p_token IS NULL OR p_token = v_own.token;
        IF v_allowed THEN
            DELETE FROM fencelock_holds h
            WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner;
            PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
        END IF;
        RETURN QUERY SELECT v_own.owner, v_own.token, v_own.acquired_at, v_own.expires_at,
            CASE WHEN v_allowed THEN 3 ELSE 2 END, v_stamp;
    END
    $$;

    -- Renew of the owner's live hold. No row: it has none. Else one row: the hold (renewed
    -- or as it was), its claim and limit, and the verdict (2 another token, 3 renewed).
    CREATE FUNCTION fencelock_renew_hold(
        p_kind text, p_name text, p_owner text, p_token bigint, p_ttl_ms bigint
    ) RETURNS TABLE (
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        claim text, lim bigint, verdict integer
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_now timestamptz;
        v_stamp timestamptz;
        v_own fencelock_holds%ROWTYPE;
        v_new fencelock_holds%ROWTYPE;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(p_kind, p_name) l;
        SELECT h.* INTO v_own FROM fencelock_holds h
        WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner AND h.expires_at > v_now;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF p_token IS NOT NULL AND p_token <> v_own.token THEN
            RETURN QUERY SELECT v_own.owner, v_own.token, v_own.acquired_at, v_own.expires_at,
                v_own.claim, v_own.lim, 2;
            RETURN;
        END IF;
        UPDATE fencelock_holds h SET expires_at = v_stamp + p_ttl_ms * interval '1 millisecond'
        WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner
        RETURNING h.* INTO v_new;
        IF v_new.expires_at < v_own.expires_at THEN
            PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
        END IF;
        RETURN QUERY SELECT v_new.owner, v_new.token, v_new.acquired_at, v_new.expires_at,
            v_new.claim, v_new.lim, 3;
    END
    $$;

    -- Ends the owner's intent to write the read-write lock `p_name`, announcing it if there
    -- was one.
    CREATE FUNCTION fencelock_withdraw_intent(p_name text, p_owner text) RETURNS void
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM fencelock_lock_name('rwlock', p_name);
        DELETE FROM fencelock_intents i WHERE i.name = p_name AND i.owner = p_owner;
        IF FOUND THEN
            PERFORM pg_notify('fencelock_hold_released', 'rwlock:' || p_name);
        END IF;
    END
    $$;
    "#,
    // 3: principals. Each lease, hold and writer's intent belongs to the principal its owner
    // authenticated as (NULL: none, a server without authentication); rows written before
    // belong to none. The functions that take an owner now take its principal too, and one
    // more force-releases a name. The functions of version 2 stay, for servers of that
    // version still running beside newer ones: they answer as the new ones do for an owner
    // of no principal.
    r#"
    ALTER TABLE fencelock_leases ADD COLUMN principal text;
    ALTER TABLE fencelock_holds ADD COLUMN principal text;
    ALTER TABLE fencelock_intents ADD COLUMN principal text;

    -- As version 2's, for the owner `p_owner` of `p_principal`. Holds and intents are still
    -- one per owner *name*: a live hold under that name of another principal (a namesake)
    -- refuses the acquire whatever the room, until it ends; a refused writer's intent
    -- under the name becomes this principal's. Rows carry each hold's principal.
    CREATE FUNCTION fencelock_acquire_hold(
        p_name text, p_owner text, p_principal text, p_claim text, p_lim bigint,
        p_ttl_ms bigint, p_intent_ms bigint
    ) RETURNS TABLE (
        role text, writer_waits boolean, retry_in_ms bigint,
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, claim text, lim bigint
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_kind text := CASE WHEN p_claim = 'permit' THEN 'semaphore' ELSE 'rwlock' END;
        v_ttl interval := p_ttl_ms * interval '1 millisecond';
        v_now timestamptz;
        v_stamp timestamptz;
        v_own fencelock_holds%ROWTYPE;
        v_holding boolean;
        v_theirs bigint;
        v_others bigint;
        v_verdict text;
        -- Busy: the earliest end of a hold, and of another writer's intent, in the way.
        v_end timestamptz;
        v_intent_end timestamptz;
        v_new fencelock_holds%ROWTYPE;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(v_kind, p_name) l;
        -- The live hold under the owner's name: its own, or a namesake's.
        SELECT h.* INTO v_own FROM fencelock_holds h
        WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner AND h.expires_at > v_now;
        v_holding := FOUND;

        -- From here on, a live hold under the owner's name is the owner's own.
        IF v_holding AND v_own.principal IS DISTINCT FROM p_principal THEN
            v_verdict := 'busy';
            v_end := v_own.expires_at;
        ELSIF p_claim = 'permit' THEN
            -- The live permits carry the semaphore's limit; another one changes nothing.
            SELECT h.lim INTO v_theirs FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name AND h.expires_at > v_now AND h.lim <> p_lim
            ORDER BY h.token LIMIT 1;
            IF FOUND THEN
                RETURN QUERY SELECT 'mismatch', NULL::boolean, NULL::bigint, NULL::text,
                    NULL::text, NULL::bigint, NULL::timestamptz, NULL::timestamptz, NULL::text,
                    v_theirs;
                RETURN;
            END IF;
            IF v_holding THEN
                v_verdict := 'extend';
            ELSE
                SELECT count(*), min(h.expires_at) INTO v_others, v_end FROM fencelock_holds h
                WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
                  AND h.expires_at > v_now;
                v_verdict := CASE WHEN v_others < p_lim THEN 'grant' ELSE 'busy' END;
            END IF;
        ELSIF p_claim = 'read' THEN
            IF v_holding THEN
                -- A writer's read is a downgrade, at once.
                v_verdict := CASE WHEN v_own.claim = 'read' THEN 'extend' ELSE 'grant' END;
            ELSE
                SELECT min(h.expires_at) INTO v_end FROM fencelock_holds h
                WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
                  AND h.expires_at > v_now AND h.claim = 'write';
                -- A new reader waits behind another owner's waiting writer (a namesake's
                -- too: the intent is not this owner's).
                SELECT min(i.expires_at) INTO v_intent_end FROM fencelock_intents i
                WHERE i.name = p_name AND (i.owner, i.principal) IS DISTINCT FROM (p_owner, p_principal)
                  AND i.expires_at > v_now;
                v_end := least(v_end, v_intent_end);
                v_verdict := CASE WHEN v_end IS NULL THEN 'grant' ELSE 'busy' END;
            END IF;
        ELSIF v_holding AND v_own.claim = 'write' THEN
            v_verdict := 'extend';
        ELSE
            -- A write: granted when no other owner holds anything (the owner's own read
            -- hold is then upgraded).
            SELECT min(h.expires_at) INTO v_end FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name AND h.owner <> p_owner
              AND h.expires_at > v_now;
            v_verdict := CASE WHEN v_end IS NULL THEN 'grant' ELSE 'busy' END;
        END IF;

        IF v_verdict = 'busy' THEN
            IF p_claim = 'write' AND p_intent_ms IS NOT NULL THEN
                INSERT INTO fencelock_intents AS i (name, owner, principal, expires_at)
                VALUES (p_name, p_owner, p_principal,
                        v_stamp + p_intent_ms * interval '1 millisecond')
                ON CONFLICT (name, owner) DO UPDATE SET
                    principal = EXCLUDED.principal, expires_at = EXCLUDED.expires_at;
            END IF;
            RETURN QUERY SELECT 'busy', v_intent_end IS NOT NULL,
                coalesce(ceil(extract(epoch FROM v_end - v_now) * 1000)::bigint, 0),
                NULL::text, NULL::text, NULL::bigint, NULL::timestamptz, NULL::timestamptz,
                NULL::text, NULL::bigint;
            -- Every live hold but the owner's own: a namesake's is another owner's.
            RETURN QUERY SELECT 'holder', NULL::boolean, NULL::bigint,
                h.owner, h.principal, h.token, h.acquired_at, h.expires_at, h.claim, h.lim
            FROM fencelock_holds h
            WHERE h.kind = v_kind AND h.name = p_name
              AND (h.owner, h.principal) IS DISTINCT FROM (p_owner, p_principal)
              AND h.expires_at > v_now
            ORDER BY h.token;
            RETURN;
        END IF;

        IF v_verdict = 'extend' THEN
            UPDATE fencelock_holds h SET acquired_at = v_stamp, expires_at = v_stamp + v_ttl
            WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner
            RETURNING h.* INTO v_new;
            IF v_new.expires_at < v_own.expires_at THEN
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
            END IF;
        ELSE
            -- The token is drawn under the name's lock, so that holds of one name are
            -- written in the order of their tokens. The row of an expired or replaced hold
            -- under the owner's name, if any, becomes the new hold.
            INSERT INTO fencelock_holds AS h
                (kind, name, owner, principal, claim, lim, token, acquired_at, expires_at)
            VALUES (v_kind, p_name, p_owner, p_principal, p_claim,
                    CASE WHEN p_claim = 'permit' THEN p_lim END,
                    nextval('fencelock_tokens'), v_stamp, v_stamp + v_ttl)
            ON CONFLICT (kind, name, owner) DO UPDATE SET
                principal = EXCLUDED.principal, claim = EXCLUDED.claim, lim = EXCLUDED.lim,
                token = EXCLUDED.token, acquired_at = EXCLUDED.acquired_at,
                expires_at = EXCLUDED.expires_at
            RETURNING h.* INTO v_new;
            IF v_holding THEN
                -- An upgrade or a downgrade: what the old hold kept out may now get in.
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
                RETURN QUERY SELECT 'replaced', NULL::boolean, NULL::bigint, v_own.owner,
                    v_own.principal, v_own.token, v_own.acquired_at, v_own.expires_at,
                    v_own.claim, v_own.lim;
            END IF;
        END IF;
        IF p_claim = 'write' THEN
            -- A writer granted no longer waits.
            DELETE FROM fencelock_intents i
            WHERE i.name = p_name AND i.owner = p_owner AND i.principal IS NOT DISTINCT FROM p_principal;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_hold_released', v_kind || ':' || p_name);
            END IF;
        END IF;
        RETURN QUERY SELECT CASE WHEN v_verdict = 'extend' THEN 'extended' ELSE 'granted' END,
            NULL::boolean, NULL::bigint, v_new.owner, v_new.principal, v_new.token,
            v_new.acquired_at, v_new.expires_at, v_new.claim, v_new.lim;
    END
    $$;

    -- The live hold under `p_owner`'s name, as the release and renew of a hold judge it:
    -- not found (NULL), 1 a namesake's of another principal, 2 another token, 3 allowed. It
    -- takes the name's lock first (see `fencelock_lock_name`), and returns its times.
    CREATE FUNCTION fencelock_judge_hold(
        p_kind text, p_name text, p_owner text, p_principal text, p_token bigint,
        OUT hold fencelock_holds, OUT verdict integer, OUT clock timestamptz, OUT stamp timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        SELECT l.clock, l.stamp INTO clock, stamp FROM fencelock_lock_name(p_kind, p_name) l;
        SELECT h.* INTO hold FROM fencelock_holds h
        WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner AND h.expires_at > clock;
        IF FOUND THEN
            verdict := CASE WHEN hold.principal IS DISTINCT FROM p_principal THEN 1
                            WHEN p_token IS NOT NULL AND p_token <> hold.token THEN 2
                            ELSE 3 END;
        END IF;
    END
    $$;

    -- Release of the owner's live hold. No row: there is none under its name. Else one row:
    -- the hold, the verdict (see `fencelock_judge_hold`) and the database's time of the
    -- release.
    CREATE FUNCTION fencelock_release_hold(
        p_kind text, p_name text, p_owner text, p_principal text, p_token bigint
    ) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, verdict integer, ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        j record;
        v fencelock_holds%ROWTYPE;
    BEGIN
        SELECT * INTO j FROM fencelock_judge_hold(p_kind, p_name, p_owner, p_principal, p_token);
        IF j.verdict IS NULL THEN
            RETURN;
        END IF;
        v := j.hold;
        IF j.verdict = 3 THEN
            DELETE FROM fencelock_holds h
            WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner;
            PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
        END IF;
        RETURN QUERY SELECT v.owner, v.principal, v.token, v.acquired_at, v.expires_at,
            j.verdict, j.stamp;
    END
    $$;

    -- Renew of the owner's live hold. No row: there is none under its name. Else one row:
    -- the hold (renewed or as it was), its claim and limit, and the verdict (see
    -- `fencelock_judge_hold`).
    CREATE FUNCTION fencelock_renew_hold(
        p_kind text, p_name text, p_owner text, p_principal text, p_token bigint, p_ttl_ms bigint
    ) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, claim text, lim bigint, verdict integer
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        j record;
        v fencelock_holds%ROWTYPE;
        v_new fencelock_holds%ROWTYPE;
    BEGIN
        SELECT * INTO j FROM fencelock_judge_hold(p_kind, p_name, p_owner, p_principal, p_token);
        IF j.verdict IS NULL THEN
            RETURN;
        END IF;
        v := j.hold;
        v_new := v;
        IF j.verdict = 3 THEN
            UPDATE fencelock_holds h SET expires_at = j.stamp + p_ttl_ms * interval '1 millisecond'
            WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner
            RETURNING h.* INTO v_new;
            IF v_new.expires_at < v.expires_at THEN
                PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
            END IF;
        END IF;
        RETURN QUERY SELECT v_new.owner, v_new.principal, v_new.token, v_new.acquired_at,
            v_new.expires_at, v_new.claim, v_new.lim, j.verdict;
    END
    $$;

    -- Ends the owner's intent to write the read-write lock `p_name` (not a namesake's),
    -- announcing it if there was one.
    CREATE FUNCTION fencelock_withdraw_intent(p_name text, p_owner text, p_principal text)
    RETURNS void LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM fencelock_lock_name('rwlock', p_name);
        DELETE FROM fencelock_intents i
        WHERE i.name = p_name AND i.owner = p_owner AND i.principal IS NOT DISTINCT FROM p_principal;
        IF FOUND THEN
            PERFORM pg_notify('fencelock_hold_released', 'rwlock:' || p_name);
        END IF;
    END
    $$;

    -- Ends every live lease (`p_kind` 'lock') or every live hold ('semaphore', 'rwlock') of
    -- `p_name`, whoever holds it, under the lock the other calls on it take, and announces
    -- it on the channel a release uses. Rows: what it ended, in token order, with the
    -- database's time it ended. Tokens come from the sequence, which the deleted rows do
    -- not touch: the next grant's is greater.
    CREATE FUNCTION fencelock_force_release(p_kind text, p_name text) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_now timestamptz;
        v_stamp timestamptz;
    BEGIN
        IF p_kind = 'lock' THEN
            -- The lock the statements on leases take (`lock_resource!` in the store's code).
            PERFORM pg_advisory_xact_lock(1718381312, hashtext(p_name));
            v_now := clock_timestamp();
            v_stamp := date_trunc('milliseconds', v_now + interval '999 microseconds');
            RETURN QUERY WITH ended AS (
                DELETE FROM fencelock_leases l WHERE l.resource = p_name AND l.expires_at > v_now
                RETURNING l.owner, l.principal, l.token, l.acquired_at, l.expires_at
            ) SELECT e.owner, e.principal, e.token, e.acquired_at, e.expires_at, v_stamp
            FROM ended e;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_released', p_name);
            END IF;
        ELSE
            SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(p_kind, p_name) l;
            RETURN QUERY WITH ended AS (
                DELETE FROM fencelock_holds h
                WHERE h.kind = p_kind AND h.name = p_name AND h.expires_at > v_now
                RETURNING h.owner, h.principal, h.token, h.acquired_at, h.expires_at
            ) SELECT e.owner, e.principal, e.token, e.acquired_at, e.expires_at, v_stamp
            FROM ended e ORDER BY e.token;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
            END IF;
        END IF;
    END
    $$;

    -- Version 2's functions, for its servers: an owner of no principal.
    CREATE OR REPLACE FUNCTION fencelock_acquire_hold(
        p_name text, p_owner text, p_claim text, p_lim bigint, p_ttl_ms bigint, p_intent_ms bigint
    ) RETURNS TABLE (
        role text, writer_waits boolean, retry_in_ms bigint,
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        claim text, lim bigint
    ) LANGUAGE sql VOLATILE AS $$
        SELECT a.role, a.writer_waits, a.retry_in_ms, a.owner, a.token, a.acquired_at,
            a.expires_at, a.claim, a.lim
        FROM fencelock_acquire_hold(p_name, p_owner, NULL, p_claim, p_lim, p_ttl_ms, p_intent_ms) a
    $$;
    CREATE OR REPLACE FUNCTION fencelock_release_hold(p_kind text, p_name text, p_owner text, p_token bigint)
    RETURNS TABLE (
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        verdict integer, ended_at timestamptz
    ) LANGUAGE sql VOLATILE AS $$
        SELECT r.owner, r.token, r.acquired_at, r.expires_at, r.verdict, r.ended_at
        FROM fencelock_release_hold(p_kind, p_name, p_owner, NULL, p_token) r
    $$;
    CREATE OR REPLACE FUNCTION fencelock_renew_hold(
        p_kind text, p_name text, p_owner text, p_token bigint, p_ttl_ms bigint
    ) RETURNS TABLE (
        owner text, token bigint, acquired_at timestamptz, expires_at timestamptz,
        claim text, lim bigint, verdict integer
    ) LANGUAGE sql VOLATILE AS $$
        SELECT r.owner, r.token, r.acquired_at, r.expires_at, r.claim, r.lim, r.verdict
        FROM fencelock_renew_hold(p_kind, p_name, p_owner, NULL, p_token, p_ttl_ms) r
    $$;
    CREATE OR REPLACE FUNCTION fencelock_withdraw_intent(p_name text, p_owner text) RETURNS void
    LANGUAGE sql VOLATILE AS $$
        SELECT fencelock_withdraw_intent(p_name, p_owner, NULL)
    $$;
    "#,
    // 4: the terms a lease keeps for its whole life, the cap on holding (`hold_until`) and the
    // lock-delay after an expiry (`lock_delay`, in ms); rows written before have neither. An
    // acquire is now a function, of one lock or of several all or none: it reads the lease
    // before it decides (a delay is decided by the expired lease), which a single statement
    // cannot do safely (see "Semaphores and read-write locks" in the module docs). Servers of
    // version 3 still running beside newer ones write leases with the statements of their
    // version; the trigger below keeps the terms true for them too.
    r#"
    ALTER TABLE fencelock_leases
        ADD COLUMN hold_until timestamptz,
        ADD COLUMN lock_delay bigint NOT NULL DEFAULT 0 CHECK (lock_delay >= 0);

    -- Servers of version 3 know no terms. Their grant over an expired lease updates its row
    -- with a new token and leaves the old lease's terms in it: the new lease has none (this
    -- version's grants insert a new row instead, so an update that changes the token is
    -- always theirs). Their renewals and extensions do not cut `expires_at` at the cap: it is
    -- cut here, and what they answer shows it cut. Their grants still ignore a lock-delay.
    CREATE FUNCTION fencelock_keep_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.token <> OLD.token THEN
            NEW.hold_until := NULL;
            NEW.lock_delay := 0;
        END IF;
        NEW.expires_at := least(NEW.expires_at, NEW.hold_until);
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER fencelock_leases_keep_terms BEFORE UPDATE ON fencelock_leases
    FOR EACH ROW WHEN (NEW.token <> OLD.token OR NEW.expires_at > NEW.hold_until)
    EXECUTE FUNCTION fencelock_keep_terms();

    -- Takes the advisory locks of the resources `p_resources` (those the statements on
    -- leases take: `lock_resource!` in the store's code) until the transaction ends, and
    -- returns the database's time once it has them (`clock`), and that time rounded up to a
    -- whole millisecond (`stamp`, what new times are counted from). The locks are taken in the
    -- order of their keys, not of the names: two names may share a key, and only callers that
    -- take shared keys in one order never wait for each other in a circle. As
    -- `fencelock_lock_name`, it refuses to run but in READ COMMITTED.
    CREATE FUNCTION fencelock_lock_resources(
        p_resources text[], OUT clock timestamptz, OUT stamp timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        v_key integer;
    BEGIN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'fencelock needs the READ COMMITTED isolation level, not %',
                current_setting('transaction_isolation');
        END IF;
        IF cardinality(p_resources) = 1 THEN
            PERFORM pg_advisory_xact_lock(1718381312, hashtext(p_resources[1]));
        ELSE
            FOR v_key IN SELECT DISTINCT hashtext(r) FROM unnest(p_resources) r ORDER BY 1 LOOP
                PERFORM pg_advisory_xact_lock(1718381312, v_key);
            END LOOP;
        END IF;
        clock := clock_timestamp();
        stamp := date_trunc('milliseconds', clock + interval '999 microseconds');
    END
    $$;

    -- Acquire of every lock of `p_resources` (distinct names) for `p_owner` of `p_principal`
    -- (NULL: none) on the terms `p_ttl_ms`, `p_max_hold_ms` (NULL: no cap) and
    -- `p_lock_delay_ms`, or of none, as `fencelock_core::LockTable::acquire_all` decides.
    -- Rows: `at` (the name's place in `p_resources`, from 1), `role`, `retry_in_ms` and the
    -- `lease`. When a lock is in the way, only the refusals, in the order given — 'held' (the
    -- live lease of another owner or of a namesake; `retry_in_ms` its time left) or
    -- 'delayed' (the lease that expired without a release less than its lock-delay ago;
    -- `retry_in_ms` until the delay ends) — and nothing is changed. Else one row per lock, in
    -- the order given: 'extended' (the caller's live lease, on its own terms whatever these
    -- say, cut at its cap), or 'granted' (a new token, tokens drawn in the order given),
    -- after the 'expired' lease it replaced, if any. An extension that shortens a lease is
    -- announced on `fencelock_released`, as a release is.
    --
    -- Each lease row is read once, after the advisory locks, and locked as it is read: only
    -- the holders of those locks write lease rows, so these row locks wait for nobody but a
    -- purge that is deleting the row (which never waits itself: it skips locked rows), and
    -- once taken they keep a purge from forgetting a lease this call is about to replace.
    CREATE FUNCTION fencelock_acquire_locks(
        p_resources text[], p_owner text, p_principal text,
        p_ttl_ms bigint, p_max_hold_ms bigint, p_lock_delay_ms bigint
    ) RETURNS TABLE (at integer, role text, retry_in_ms bigint, lease fencelock_leases)
    LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_ttl interval := p_ttl_ms * interval '1 millisecond';
        v_now timestamptz;
        v_stamp timestamptz;
        v_cap timestamptz;
        v_closed timestamptz;
        v_old fencelock_leases;
        v_olds fencelock_leases[] := '{}';
        v_refused boolean := false;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_resources(p_resources) l;
        v_cap := v_stamp + p_max_hold_ms * interval '1 millisecond';
        FOR i IN 1 .. cardinality(p_resources) LOOP
            -- No row: every field NULL, and neither refusal below.
            SELECT l.* INTO v_old FROM fencelock_leases l WHERE l.resource = p_resources[i]
            FOR UPDATE;
            v_olds := v_olds || v_old;
            at := i;
            lease := v_old;
            v_closed := v_old.expires_at + v_old.lock_delay * interval '1 millisecond';
            IF v_old.expires_at > v_now
               AND (v_old.owner, v_old.principal) IS DISTINCT FROM (p_owner, p_principal) THEN
                role := 'held';
                retry_in_ms := greatest(0, floor(extract(epoch FROM v_old.expires_at - v_now) * 1000));
                RETURN NEXT;
                v_refused := true;
            ELSIF v_old.expires_at <= v_now AND v_now < v_closed THEN
                role := 'delayed';
                retry_in_ms := ceil(extract(epoch FROM v_closed - v_now) * 1000);
                RETURN NEXT;
                v_refused := true;
            END IF;
        END LOOP;
        IF v_refused THEN
            RETURN;
        END IF;

        retry_in_ms := NULL;
        FOR i IN 1 .. cardinality(p_resources) LOOP
            at := i;
            v_old := v_olds[i];
            IF v_old.expires_at > v_now THEN
                role := 'extended';
                UPDATE fencelock_leases l
                SET acquired_at = v_stamp, expires_at = least(v_stamp + v_ttl, l.hold_until)
                WHERE l.resource = p_resources[i]
                RETURNING l.* INTO lease;
                IF (lease).expires_at < v_old.expires_at THEN
                    PERFORM pg_notify('fencelock_released', p_resources[i]);
                END IF;
            ELSE
                IF v_old.resource IS NOT NULL THEN
                    -- Deleted, not updated with a new token: see `fencelock_keep_terms`.
                    DELETE FROM fencelock_leases l WHERE l.resource = p_resources[i];
                    role := 'expired';
                    lease := v_old;
                    RETURN NEXT;
                END IF;
                role := 'granted';
                INSERT INTO fencelock_leases AS l
                    (resource, owner, principal, token, acquired_at, expires_at, hold_until, lock_delay)
                VALUES (p_resources[i], p_owner, p_principal, nextval('fencelock_tokens'), v_stamp,
                        least(v_stamp + v_ttl, v_cap), v_cap, p_lock_delay_ms)
                RETURNING l.* INTO lease;
            END IF;
            RETURN NEXT;
        END LOOP;
    END
    $$;

    -- As version 3's `fencelock_force_release`, with each lease's terms (a hold has none:
    -- NULL and 0). A lease that expired is not live: its lock-delay, if any, still runs.
    CREATE FUNCTION fencelock_force_release_with_terms(p_kind text, p_name text) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, hold_until timestamptz, lock_delay bigint, ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_now timestamptz;
        v_stamp timestamptz;
    BEGIN
        IF p_kind = 'lock' THEN
            SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_resources(ARRAY[p_name]) l;
            RETURN QUERY WITH ended AS (
                DELETE FROM fencelock_leases l WHERE l.resource = p_name AND l.expires_at > v_now
                RETURNING l.*
            ) SELECT e.owner, e.principal, e.token, e.acquired_at, e.expires_at, e.hold_until,
                e.lock_delay, v_stamp
            FROM ended e;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_released', p_name);
            END IF;
        ELSE
            SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_name(p_kind, p_name) l;
            RETURN QUERY WITH ended AS (
                DELETE FROM fencelock_holds h
                WHERE h.kind = p_kind AND h.name = p_name AND h.expires_at > v_now
                RETURNING h.owner, h.principal, h.token, h.acquired_at, h.expires_at
            ) SELECT e.owner, e.principal, e.token, e.acquired_at, e.expires_at,
                NULL::timestamptz, 0::bigint, v_stamp
            FROM ended e ORDER BY e.token;
            IF FOUND THEN
                PERFORM pg_notify('fencelock_hold_released', p_kind || ':' || p_name);
            END IF;
        END IF;
    END
    $$;

    -- Version 3's, for its servers.
    CREATE OR REPLACE FUNCTION fencelock_force_release(p_kind text, p_name text) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, ended_at timestamptz
    ) LANGUAGE sql VOLATILE AS $$
        SELECT f.owner, f.principal, f.token, f.acquired_at, f.expires_at, f.ended_at
        FROM fencelock_force_release_with_terms(p_kind, p_name) f
    $$;
    "#, // 5: lease metadata. Each lease and hold keeps what its holder said about it (`meta`, a
    // flat JSON object as compact text, kept byte for byte: jsonb would reorder its keys;
    // NULL: none); rows written before have none. A grant that issues a token takes the
    // metadata sent; an extension or a renewal replaces it only if some is sent. The acquire
    // of locks takes it as one more argument; the functions of holds are wrapped by ones that
    // take it and answer it, and the releases answer the metadata of what they ended. Servers
    // of version 4 still running beside newer ones keep using their functions: the triggers
    // below drop the metadata of a row whose token they change, so their grants carry none.
    r#"
    ALTER TABLE fencelock_leases ADD COLUMN meta text;
    ALTER TABLE fencelock_holds ADD COLUMN meta text;

    -- As version 4's, and a new token (a grant by a server of version 3) has no metadata.
    CREATE OR REPLACE FUNCTION fencelock_keep_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.token <> OLD.token THEN
            NEW.hold_until := NULL;
            NEW.lock_delay := 0;
            NEW.meta := NULL;
        END IF;
        NEW.expires_at := least(NEW.expires_at, NEW.hold_until);
        RETURN NEW;
    END
    $$;

    -- A hold row that gets a new token (a grant over the owner's expired or replaced hold)
    -- is a new hold: it has no metadata until its grant sets some.
    CREATE FUNCTION fencelock_new_hold_has_no_meta() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.meta := NULL;
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER fencelock_holds_new_token_no_meta BEFORE UPDATE ON fencelock_holds
    FOR EACH ROW WHEN (NEW.token <> OLD.token)
    EXECUTE FUNCTION fencelock_new_hold_has_no_meta();

    -- As version 4's `fencelock_acquire_locks`, with the metadata `p_meta` (NULL: none): a
    -- grant's, and an extension's if not NULL (else the lease keeps its own).
    CREATE FUNCTION fencelock_acquire_locks(
        p_resources text[], p_owner text, p_principal text,
        p_ttl_ms bigint, p_max_hold_ms bigint, p_lock_delay_ms bigint, p_meta text
    ) RETURNS TABLE (at integer, role text, retry_in_ms bigint, lease fencelock_leases)
    LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_ttl interval := p_ttl_ms * interval '1 millisecond';
        v_now timestamptz;
        v_stamp timestamptz;
        v_cap timestamptz;
        v_closed timestamptz;
        v_old fencelock_leases;
        v_olds fencelock_leases[] := '{}';
        v_refused boolean := false;
    BEGIN
        SELECT l.clock, l.stamp INTO v_now, v_stamp FROM fencelock_lock_resources(p_resources) l;
        v_cap := v_stamp + p_max_hold_ms * interval '1 millisecond';
        FOR i IN 1 .. cardinality(p_resources) LOOP
            SELECT l.* INTO v_old FROM fencelock_leases l WHERE l.resource = p_resources[i]
            FOR UPDATE;
            v_olds := v_olds || v_old;
            at := i;
            lease := v_old;
            v_closed := v_old.expires_at + v_old.lock_delay * interval '1 millisecond';
            IF v_old.expires_at > v_now
               AND (v_old.owner, v_old.principal) IS DISTINCT FROM (p_owner, p_principal) THEN
                role := 'held';
                retry_in_ms := greatest(0, floor(extract(epoch FROM v_old.expires_at - v_now) * 1000));
                RETURN NEXT;
                v_refused := true;
            ELSIF v_old.expires_at <= v_now AND v_now < v_closed THEN
                role := 'delayed';
                retry_in_ms := ceil(extract(epoch FROM v_closed - v_now) * 1000);
                RETURN NEXT;
                v_refused := true;
            END IF;
        END LOOP;
        IF v_refused THEN
            RETURN;
        END IF;

        retry_in_ms := NULL;
        FOR i IN 1 .. cardinality(p_resources) LOOP
            at := i;
            v_old := v_olds[i];
            IF v_old.expires_at > v_now THEN
                role := 'extended';
                UPDATE fencelock_leases l
                SET acquired_at = v_stamp, expires_at = least(v_stamp + v_ttl, l.hold_until),
                    meta = coalesce(p_meta, l.meta)
                WHERE l.resource = p_resources[i]
                RETURNING l.* INTO lease;
                IF (lease).expires_at < v_old.expires_at THEN
                    PERFORM pg_notify('fencelock_released', p_resources[i]);
                END IF;
            ELSE
                IF v_old.resource IS NOT NULL THEN
                    DELETE FROM fencelock_leases l WHERE l.resource = p_resources[i];
                    role := 'expired';
                    lease := v_old;
                    RETURN NEXT;
                END IF;
                role := 'granted';
                INSERT INTO fencelock_leases AS l
                    (resource, owner, principal, token, acquired_at, expires_at, hold_until, lock_delay,
                     meta)
                VALUES (p_resources[i], p_owner, p_principal, nextval('fencelock_tokens'), v_stamp,
                        least(v_stamp + v_ttl, v_cap), v_cap, p_lock_delay_ms, p_meta)
                RETURNING l.* INTO lease;
            END IF;
            RETURN NEXT;
        END LOOP;
    END
    $$;

    -- Version 3's `fencelock_acquire_hold` with the metadata `p_meta` (NULL: none), and each
    -- row's metadata: a new hold gets `p_meta`, an extended one keeps its own unless
    -- `p_meta` is given; a replaced hold and every other owner's hold show theirs. The
    -- name's lock is taken first, so that the owner's hold read here is the one it judges.
    CREATE FUNCTION fencelock_acquire_hold(
        p_name text, p_owner text, p_principal text, p_claim text, p_lim bigint,
        p_ttl_ms bigint, p_intent_ms bigint, p_meta text
    ) RETURNS TABLE (
        role text, writer_waits boolean, retry_in_ms bigint,
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, claim text, lim bigint, meta text
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_kind text := CASE WHEN p_claim = 'permit' THEN 'semaphore' ELSE 'rwlock' END;
        v_own_meta text;
        a record;
    BEGIN
        PERFORM fencelock_lock_name(v_kind, p_name);
        SELECT h.meta INTO v_own_meta FROM fencelock_holds h
        WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner;
        FOR a IN SELECT * FROM fencelock_acquire_hold(
            p_name, p_owner, p_principal, p_claim, p_lim, p_ttl_ms, p_intent_ms
        ) LOOP
            IF a.role = 'granted' OR (a.role = 'extended' AND p_meta IS NOT NULL) THEN
                UPDATE fencelock_holds h SET meta = p_meta
                WHERE h.kind = v_kind AND h.name = p_name AND h.owner = p_owner;
            END IF;
            RETURN QUERY SELECT a.role, a.writer_waits, a.retry_in_ms, a.owner, a.principal,
                a.token, a.acquired_at, a.expires_at, a.claim, a.lim,
                CASE a.role
                    WHEN 'granted' THEN p_meta
                    WHEN 'extended' THEN coalesce(p_meta, v_own_meta)
                    WHEN 'replaced' THEN v_own_meta
                    WHEN 'holder' THEN (SELECT h.meta FROM fencelock_holds h
                        WHERE h.kind = v_kind AND h.name = p_name AND h.owner = a.owner)
                END;
        END LOOP;
    END
    $$;

    -- Version 3's `fencelock_release_hold`, with the metadata of the hold it ended.
    CREATE FUNCTION fencelock_release_hold_meta(
        p_kind text, p_name text, p_owner text, p_principal text, p_token bigint
    ) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, meta text, verdict integer, ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_meta text;
    BEGIN
        PERFORM fencelock_lock_name(p_kind, p_name);
        SELECT h.meta INTO v_meta FROM fencelock_holds h
        WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner;
        RETURN QUERY SELECT r.owner, r.principal, r.token, r.acquired_at, r.expires_at, v_meta,
            r.verdict, r.ended_at
        FROM fencelock_release_hold(p_kind, p_name, p_owner, p_principal, p_token) r;
    END
    $$;

    -- Version 3's `fencelock_renew_hold`, which also replaces the hold's metadata with
    -- `p_meta` if given (and allowed), and answers the hold's metadata.
    CREATE FUNCTION fencelock_renew_hold(
        p_kind text, p_name text, p_owner text, p_principal text, p_token bigint, p_ttl_ms bigint,
        p_meta text
    ) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, meta text, claim text, lim bigint, verdict integer
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        r record;
        v_meta text;
    BEGIN
        FOR r IN SELECT * FROM fencelock_renew_hold(p_kind, p_name, p_owner, p_principal, p_token, p_ttl_ms)
        LOOP
            IF r.verdict = 3 AND p_meta IS NOT NULL THEN
                UPDATE fencelock_holds h SET meta = p_meta
                WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner;
            END IF;
            SELECT h.meta INTO v_meta FROM fencelock_holds h
            WHERE h.kind = p_kind AND h.name = p_name AND h.owner = p_owner;
            RETURN QUERY SELECT r.owner, r.principal, r.token, r.acquired_at, r.expires_at, v_meta,
                r.claim, r.lim, r.verdict;
        END LOOP;
    END
    $$;

    -- Version 4's `fencelock_force_release_with_terms`, with the metadata of each lease or
    -- hold it ended (read under the name's lock before they go).
    CREATE FUNCTION fencelock_force_release_with_meta(p_kind text, p_name text) RETURNS TABLE (
        owner text, principal text, token bigint, acquired_at timestamptz,
        expires_at timestamptz, meta text, hold_until timestamptz, lock_delay bigint,
        ended_at timestamptz
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    DECLARE
        v_metas jsonb;
    BEGIN
        IF p_kind = 'lock' THEN
            PERFORM fencelock_lock_resources(ARRAY[p_name]);
            SELECT jsonb_object_agg(l.token::text, l.meta) INTO v_metas
            FROM fencelock_leases l WHERE l.resource = p_name;
        ELSE
            PERFORM fencelock_lock_name(p_kind, p_name);
            SELECT jsonb_object_agg(h.token::text, h.meta) INTO v_metas
            FROM fencelock_holds h WHERE h.kind = p_kind AND h.name = p_name;
        END IF;
        RETURN QUERY SELECT f.owner, f.principal, f.token, f.acquired_at, f.expires_at,
            v_metas ->> f.token::text, f.hold_until, f.lock_delay, f.ended_at
        FROM fencelock_force_release_with_terms(p_kind, p_name) f;
    END
    $$;
    "#,
];

/// Takes fencelock's advisory lock on the resource `$1` until the transaction ends. The
/// first key is `0x666c6b00` (`flk\x00`), the second a hash of the name: two names may share
/// a lock, which only makes them wait for each other.
macro_rules! lock_resource {
    () => {
        "pg_advisory_xact_lock(1718381312, hashtext($1::text))"
    };
}

/// Milliseconds since the epoch of a `timestamptz` that holds whole milliseconds.
macro_rules! ms {
    ($column:expr) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000)::bigint")
    };
}

/// A lease's columns, as `row::lease` reads them: owner, principal (NULL: none), token,
/// acquired_at and expires_at in ms, and meta (NULL: none).
macro_rules! lease_columns {
    () => {
        concat!(
            "owner, principal, token, ",
            ms!("acquired_at"),
            ", ",
            ms!("expires_at"),
            ", meta"
        )
    };
}

/// A hold's columns, as `row::hold` reads them: the lease's (see [`lease_columns!`]), then
/// its claim and the semaphore's limit (NULL for a read-write lock).
macro_rules! hold_columns {
    () => {
        concat!(lease_columns!(), ", claim, lim")
    };
}

/// A lock's columns, as `row::lock` reads them: the lease's (see [`lease_columns!`]), then
/// its terms: hold_until in ms (NULL: no cap) and lock_delay in ms.
macro_rules! lock_columns {
    () => {
        concat!(lease_columns!(), ", ", ms!("hold_until"), ", lock_delay")
    };
}

/// Whether the row `l` of a lease is the caller's: its owner is `$2` of the principal `$3`
/// (NULL, no principal, is one of them). Another owner name is another owner; so is the same
/// name of another principal, a namesake, who may neither extend, renew nor release it.
macro_rules! callers {
    () => {
        "(l.owner, l.principal) IS NOT DISTINCT FROM ($2::text, $3::text)"
    };
}

/// The database's time `$t` rounded up to a whole millisecond: what new times are counted
/// from, so that a lease never lasts less than asked and never ends before it began.
macro_rules! stamp {
    ($t:literal) => {
        concat!(
            "date_trunc('milliseconds', ",
            $t,
            " + interval '999 microseconds')"
        )
    };
}

/// The start of every statement that draws a token or judges a lease: lock the resource
/// `$1`, then read the clock (`clock.now`), so that what it judges by that time is what
/// was committed before it had the lock.
macro_rules! locked_clock {
    () => {
        concat!(
            "WITH locked AS MATERIALIZED (
                SELECT ",
            lock_resource!(),
            "
            ), clock AS MATERIALIZED (
                SELECT clock_timestamp() AS now FROM locked
            )"
        )
    };
}

/// The start of release and renew (see [`locked_clock!`]), then lock the row and judge the
/// caller. `verdict`: 0 no live lease, 1 another owner (a namesake too), 2 another token, 3
/// allowed. Parameters: `$1` resource, `$2` owner, `$3` its principal or NULL, `$4` the
/// caller's token or NULL.
macro_rules! judge_holder {
    () => {
        concat!(
            locked_clock!(),
            ", holder AS MATERIALIZED (
                SELECT l.resource, l.owner, l.principal, l.token, l.acquired_at, l.expires_at,
                    l.meta, l.hold_until, l.lock_delay,
                    CASE WHEN l.expires_at <= clock.now THEN 0
                         WHEN NOT ",
            callers!(),
            " THEN 1
                         WHEN $4::bigint IS NOT NULL AND l.token <> $4::bigint THEN 2
                         ELSE 3 END AS verdict
                FROM clock JOIN fencelock_leases l ON l.resource = $1::text
                FOR UPDATE OF l
            )"
        )
    };
}

/// `$1` the resources (distinct names), `$2` owner, `$3` its principal or NULL, `$4` TTL in
/// ms, `$5` the cap on holding in ms or NULL, `$6` the lock-delay in ms, `$7` the metadata or
/// NULL. Rows: the name's
/// place in `$1` (from 1), the role, `retry_in_ms`, then a lock's columns (see
/// [`lock_columns!`]) of the lease `fencelock_acquire_locks` in the migrations returns: the
/// refusals alone if any lock is in the way, else every lock granted or extended.
pub(super) const ACQUIRE: &str = concat!(
    "SELECT at, role, retry_in_ms, ",
    lock_columns!(),
    " FROM (
        SELECT at, role, retry_in_ms, (lease).*
        FROM fencelock_acquire_locks($1::text[], $2::text, $3::text, $4::bigint, $5::bigint,
            $6::bigint, $7::text)
    ) acquired"
);

/// The acquire of one lock, answered without `fencelock_acquire_locks` when it is a grant of
/// a name with no lease row, or a refusal: another owner's live lease (`held`) or an expired
/// one within its lock-delay (`delayed`). Parameters as [`ACQUIRE`]'s, but `$1` is the one
/// resource; the rows as [`ACQUIRE`] answers them. No row when the name has the caller's own
/// live lease or an expired one past its lock-delay (an extension, or a grant that replaces
/// it), which the caller then gives to [`ACQUIRE`].
///
/// It reads the row after the resource's lock (`found`), as the function does: `FOR UPDATE`
/// reads the latest version of a row the statement's snapshot (taken before the lock was
/// granted) holds, and skips one deleted since. A row inserted since is not in the snapshot,
/// but the insert meets it in the unique index, which sees every committed row: then the
/// statement answers nothing, and the function judges. So a grant here is never over a
/// lease this statement could not see. A missing row is a free name: a release and a
/// force-release delete a live lease, and a purge only a lease whose lock-delay has ended.
/// The token is drawn after the resource's lock, as every grant's is, so that leases of one
/// name are written in the order of their tokens; it is drawn when the snapshot has no row
/// for the name, and not used when the insert then meets a row committed since.
pub(super) const ACQUIRE_ONE: &str = concat!(
    locked_clock!(),
    ", found AS MATERIALIZED (
        SELECT l.*, clock.now,
            CASE WHEN l.expires_at > clock.now THEN
                    CASE WHEN NOT ",
    callers!(),
    " THEN 'held' END
                 WHEN clock.now < l.expires_at + l.lock_delay * interval '1 millisecond'
                    THEN 'delayed'
            END AS refusal
        FROM clock JOIN fencelock_leases l ON l.resource = $1::text
        FOR UPDATE OF l
    ), granted AS (
        INSERT INTO fencelock_leases AS l
            (resource, owner, principal, token, acquired_at, expires_at, hold_until, lock_delay,
             meta)
        SELECT $1::text, $2::text, $3::text, nextval('fencelock_tokens'), stamp,
            least(stamp + $4::bigint * interval '1 millisecond', cap), cap, $6::bigint, $7::text
        FROM (
            SELECT stamp, stamp + $5::bigint * interval '1 millisecond' AS cap
            FROM (SELECT ",
    stamp!("now"),
    " AS stamp FROM clock) c
        ) g
        WHERE NOT EXISTS (SELECT FROM found)
        ON CONFLICT (resource) DO NOTHING
        RETURNING 1 AS at, 'granted'::text AS role, NULL::bigint AS retry_in_ms, ",
    lock_columns!(),
    "
    )
    SELECT * FROM granted
    UNION ALL
    SELECT 1, refusal,
        CASE refusal
            WHEN 'held' THEN greatest(0, floor(extract(epoch FROM expires_at - now) * 1000))
            ELSE ceil(extract(epoch FROM expires_at + lock_delay * interval '1 millisecond' - now)
                      * 1000)
        END::bigint, ",
    lock_columns!(),
    "
    FROM found WHERE refusal IS NOT NULL"
);

/// `$1` resource, `$2` owner, `$3` its principal or NULL, `$4` token or NULL. No row: no
/// lease at all. The columns after the lock's: the verdict, and the database's time of the
/// release in ms. A release deletes the row, so no lock-delay follows it. It does not
/// notify: the store announces it (see `notify.rs` for why).
pub(super) const RELEASE: &str = concat!(
    judge_holder!(),
    ", released AS (
        DELETE FROM fencelock_leases l USING holder h
        WHERE l.resource = h.resource AND h.verdict = 3
    )
    SELECT ",
    lock_columns!(),
    ", verdict, ",
    // Rounded up to whole milliseconds like the other stamps, so it is never before acquired_at.
    ms!(stamp!("(SELECT now FROM clock)")),
    " AS ended_at
    FROM holder"
);

/// `$1` resource, `$2` owner, `$3` its principal or NULL, `$4` token or NULL, `$5` TTL in ms,
/// `$6` the metadata to replace the lease's with, or NULL to keep it. No row: no lease at all.
/// Else a lock's columns, then the verdict, then whether the renewal shortened the lease
/// (which the store announces to waiters). The renewal is cut at the lease's cap.
pub(super) const RENEW: &str = concat!(
    judge_holder!(),
    ", renewed AS (
        UPDATE fencelock_leases l
        SET expires_at = least(",
    stamp!("clock.now"),
    " + $5::bigint * interval '1 millisecond', l.hold_until),
            meta = coalesce($6::text, l.meta)
        FROM holder h, clock
        WHERE l.resource = h.resource AND h.verdict = 3
        RETURNING l.expires_at, l.meta
    )
    SELECT h.owner, h.principal, h.token, ",
    ms!("h.acquired_at"),
    ", coalesce((SELECT ",
    ms!("expires_at"),
    " FROM renewed), ",
    ms!("h.expires_at"),
    "), CASE WHEN EXISTS (SELECT FROM renewed) THEN (SELECT meta FROM renewed) ELSE h.meta END, ",
    ms!("h.hold_until"),
    ", h.lock_delay, h.verdict,
        coalesce((SELECT r.expires_at < h.expires_at FROM renewed r), false) AS shortened
    FROM holder h"
);

/// `$1` resource.
pub(super) const GET: &str = concat!(
    "SELECT ",
    lock_columns!(),
    " FROM fencelock_leases WHERE resource = $1::text AND expires_at > statement_timestamp()"
);

/// `$1` prefix, `$2` resource to start after or NULL, `$3` how many rows.
pub(super) const LIST: &str = concat!(
    "SELECT resource, ",
    lock_columns!(),
    " FROM fencelock_leases
    WHERE resource >= $1::text AND starts_with(resource, $1::text)
      AND ($2::text IS NULL OR resource > $2::text)
      AND expires_at > statement_timestamp()
    ORDER BY resource
    LIMIT $3::bigint"
);

/// One server purges at a time (the others purge nothing meanwhile): two purges deleting
/// the same rows in different orders could deadlock each other. Rows that a call has locked
/// are skipped (it is replacing or ending them, or they go next time), so that a purge never
/// waits for a call that may wait for it. At most `$1` leases and `$1` holds go in one purge,
/// those that expired first, so that a backlog (after an outage) is a series of short
/// transactions rather than one long one; the server asks again while a batch is full. The
/// store announces each purged lease and hold to waiters on every server; an ended intent
/// held nobody back any more. A lease is forgotten only once its lock-delay has ended too
/// (`expires_at + lock_delay`): until then its row is what keeps the resource closed. Rows:
/// the kind (`lock`, `semaphore` or `rwlock`), the name, then a lock's columns (see
/// [`lock_columns!`]; a hold has no terms).
pub(super) const PURGE: &str = concat!(
    "WITH turn AS MATERIALIZED (
        SELECT pg_try_advisory_xact_lock(1718381314, 0) AS ours
    ), purged AS (
        DELETE FROM fencelock_leases
        WHERE resource IN (
            SELECT resource FROM fencelock_leases
            WHERE expires_at <= now() AND expires_at + lock_delay * interval '1 millisecond' <= now()
              AND (SELECT ours FROM turn)
            ORDER BY expires_at
            LIMIT $1::bigint
            FOR UPDATE SKIP LOCKED
        )
        RETURNING 'lock' AS kind, resource AS name, owner, principal, token, acquired_at, expires_at,
            meta, hold_until, lock_delay
    ), purged_holds AS (
        DELETE FROM fencelock_holds
        WHERE (kind, name, owner) IN (
            SELECT kind, name, owner FROM fencelock_holds
            WHERE expires_at <= now() AND (SELECT ours FROM turn)
            ORDER BY expires_at
            LIMIT $1::bigint
            FOR UPDATE SKIP LOCKED
        )
        RETURNING kind, name, owner, principal, token, acquired_at, expires_at, meta,
            NULL::timestamptz AS hold_until, 0::bigint AS lock_delay
    ), ended_intents AS (
        DELETE FROM fencelock_intents
        WHERE (name, owner) IN (
            SELECT name, owner FROM fencelock_intents
            WHERE expires_at <= now() AND (SELECT ours FROM turn)
            FOR UPDATE SKIP LOCKED
        )
    ), expired AS (
        SELECT * FROM purged UNION ALL SELECT * FROM purged_holds
    )
    SELECT kind, name, ",
    lock_columns!(),
    " FROM expired"
);

/// `$1` name, `$2` owner, `$3` its principal or NULL, `$4` claim (`permit`, `read` or
/// `write`), `$5` the semaphore's limit or NULL, `$6` TTL in ms, `$7` a waiting writer's
/// intent in ms or NULL, `$8` the metadata or NULL. Rows: the role of the row, `writer_waits` and `retry_in_ms` (for
/// `busy`), then a hold's columns (see [`hold_columns!`]), as `fencelock_acquire_hold` in
/// the migrations returns them.
pub(super) const ACQUIRE_HOLD: &str = concat!(
    "SELECT role, writer_waits, retry_in_ms, ",
    hold_columns!(),
    " FROM fencelock_acquire_hold($1::text, $2::text, $3::text, $4::text, $5::bigint, $6::bigint,
        $7::bigint, $8::text)"
);

/// `$1` kind, `$2` name: the live holds, in token order.
pub(super) const HOLDS: &str = concat!(
    "SELECT ",
    hold_columns!(),
    " FROM fencelock_holds
    WHERE kind = $1::text AND name = $2::text AND expires_at > statement_timestamp()
    ORDER BY token"
);

/// `$1` kind, `$2` prefix, `$3` name to start after or NULL, `$4` how many names. Rows: the
/// name, then a hold's columns, by name and token.
pub(super) const LIST_HOLDS: &str = concat!(
    "WITH page AS (
        SELECT DISTINCT name FROM fencelock_holds
        WHERE kind = $1::text AND name >= $2::text AND starts_with(name, $2::text)
          AND ($3::text IS NULL OR name > $3::text)
          AND expires_at > statement_timestamp()
        ORDER BY name
        LIMIT $4::bigint
    )
    SELECT name, ",
    hold_columns!(),
    " FROM fencelock_holds JOIN page USING (name)
    WHERE kind = $1::text AND expires_at > statement_timestamp()
    ORDER BY name, token"
);

/// `$1` kind, `$2` name, `$3` owner, `$4` its principal or NULL, `$5` token or NULL. No row:
/// no live hold under the owner's name. Else the hold's lease (see [`lease_columns!`]; no
/// terms), the verdict and the time it ended, as [`RELEASE`]'s rows.
pub(super) const RELEASE_HOLD: &str = concat!(
    "SELECT ",
    lease_columns!(),
    ", verdict, ",
    ms!("ended_at"),
    " FROM fencelock_release_hold_meta($1::text, $2::text, $3::text, $4::text, $5::bigint)"
);

/// `$1` kind, `$2` name, `$3` owner, `$4` its principal or NULL, `$5` token or NULL, `$6`
/// TTL in ms, `$7` the metadata to replace the hold's with, or NULL to keep it. No row: no live hold under the owner's name. Else a hold's columns, then the
/// verdict.
pub(super) const RENEW_HOLD: &str = concat!(
    "SELECT ",
    hold_columns!(),
    ", verdict FROM fencelock_renew_hold($1::text, $2::text, $3::text, $4::text, $5::bigint, $6::bigint,
        $7::text)"
);

/// `$1` name, `$2` owner, `$3` its principal or NULL.
pub(super) const WITHDRAW_INTENT: &str = "SELECT fencelock_withdraw_intent($1::text, $2::text, $3::text)";

/// `$1` kind (`lock`, `semaphore` or `rwlock`), `$2` name. Rows: each lease or hold it
/// ended, in token order: a lock's columns (see [`lock_columns!`]; a hold has no terms),
/// then the database's time it ended in ms.
pub(super) const FORCE_RELEASE: &str = concat!(
    "SELECT ",
    lock_columns!(),
    ", ",
    ms!("ended_at"),
    " FROM fencelock_force_release_with_meta($1::text, $2::text)"
);

/// Brings the schema up to the newest version, in one transaction, under an advisory lock so
/// that servers starting together apply each step once.
pub(super) async fn migrate(pool: &Pool) -> Result<(), PgError> {
    const DOING: &str = "migrate the schema";
    let mut client = pool.get().await.map_err(PgError::pool(DOING))?;
    let tx = client.transaction().await.map_err(PgError::db(DOING))?;
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&MIGRATION_LOCK_CLASS])
        .await
        .map_err(PgError::db(DOING))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS fencelock_schema_version (
            version    integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(PgError::db(DOING))?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM fencelock_schema_version",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(PgError::db(DOING))?;
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if current > known {
        return Err(PgError::NewerSchema { current, known });
    }
    for (version, step) in (1..).zip(MIGRATIONS).skip(usize::try_from(current).unwrap_or(0)) {
        tx.batch_execute(step).await.map_err(PgError::db(DOING))?;
        tx.execute(
            "INSERT INTO fencelock_schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(PgError::db(DOING))?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    tx.commit().await.map_err(PgError::db(DOING))
}
