package pgbridge

import (
	"encoding/hex"
	"errors"
	"slices"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// delivery returns a reset delivery for the next row of the claim.
func (c *claimer) delivery() *Delivery {
	var d *Delivery
	if n := len(c.live); n < len(c.free) {
		d = c.free[n]
	} else {
		d = &Delivery{}
		c.free = append(c.free, d)
	}
	d.reset()
	c.live = append(c.live, d)
	return d
}

func (c *claimer) str(raw []byte, last *string) string {
	if raw == nil {
		return ""
	}
	if string(raw) == *last {
		return *last
	}
	*last = string(raw)
	return *last
}

// read turns the claimed rows into deliveries, decoding payloads while the
// driver's values are current.
func (c *claimer) read(rows pgx.Rows, conn *pgx.Conn) (int, error) {
	s, b := c.s, c.b
	now := nanotime()
	for rows.Next() {
		raw := rows.RawValues()
		fd := rows.FieldDescriptions()
		d := c.delivery()
		d.form, d.conn, d.claimNs = s.Form, conn, now
		switch s.Form {
		case Lease:
			d.conn = nil
		case RowLock:
			c.tx.conn, c.tx.c = conn, c
			d.tx = &c.tx
		}
		id, err := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
		if err != nil {
			return 0, err
		}
		att, err := rawInt64(raw[2], fd[2].Format, fd[2].DataTypeOID)
		if err != nil {
			return 0, err
		}
		d.ID, d.Key = id, string(raw[1])
		prio, err := rawInt64(raw[8], fd[8].Format, fd[8].DataTypeOID)
		if err != nil {
			return 0, err
		}
		if p := int32(-prio); !c.minSet || p < c.minP || p == c.minP && id < c.minID {
			c.minSet, c.minP, c.minID = true, p, id
		}
		d.Attempt = int(att)
		if s.Form == RowLock {
			d.Attempt++ // the lease and advisory claims counted it already
		}
		d.Type = c.str(raw[3], &c.lastType)
		d.ContentType = c.str(raw[4], &c.lastCT)
		if raw[6] != nil {
			h := rawJSON(raw[6], fd[6].Format, fd[6].DataTypeOID)
			start := len(c.arena)
			c.arena = append(c.arena, h...)
			d.hdrRaw = c.arena[start:len(c.arena):len(c.arena)]
		}
		if s.Form == Lease {
			if d.token, err = rawTime(raw[7], fd[7].Format, fd[7].DataTypeOID); err != nil {
				return 0, err
			}
		}
		if n := len(s.Table.RowColumns); n > 0 {
			d.row.ID, d.row.Key, d.row.Attempt, d.row.Columns = d.ID, d.Key, d.Attempt, s.Table.RowColumns
			for i := 9; i < 9+n; i++ {
				var v []byte
				if raw[i] != nil {
					start := len(c.arena)
					c.arena = append(c.arena, raw[i]...)
					v = c.arena[start:len(c.arena):len(c.arena)]
				}
				d.row.vals = append(d.row.vals, v)
				d.row.oids = append(d.row.oids, fd[i].DataTypeOID)
				d.row.fmts = append(d.row.fmts, fd[i].Format)
			}
		}
		if s.Form == RowLock {
			x, st := len(raw)-2, len(raw)-1
			if c.xid, err = rawInt64(raw[x], fd[x].Format, fd[x].DataTypeOID); err != nil {
				return 0, err
			}
			if c.started, err = rawTime(raw[st], fd[st].Format, fd[st].DataTypeOID); err != nil {
				return 0, err
			}
		}
		if s.Form != RowLock && s.MaxAttempts > 0 && d.Attempt > s.MaxAttempts {
			d.undec = errMaxAttempts // not run: settled as dead letter below
			d.outcome = DeadLetterWith("exceeded max attempts")
			continue
		}
		body := raw[5]
		if fd[5].Format == pgx.TextFormatCode && fd[5].DataTypeOID == pgtype.ByteaOID && body != nil {
			// A text-format bytea (simple protocol, exec mode): "\x" and hex.
			if body, err = c.unhex(body); err != nil {
				return 0, err
			}
		}
		if err := c.r.read(d, body); err != nil {
			b.stats.decodeFailures.Add(1)
			b.obs.DecodeFailed(s.Name)
			d.undec = err
			d.outcome = s.DecodePolicy.outcome(s.DecodeRetryDelay, err)
		}
	}
	return len(c.live), rows.Err()
}

// unhex decodes a text-format bytea into the arena.
func (c *claimer) unhex(v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return nil, payload.NewError(payload.ProtocolError, "pgbridge", "bytea in text format without the \\x prefix")
	}
	start := len(c.arena)
	c.arena = slices.Grow(c.arena, (len(v)-2)/2)[:start+(len(v)-2)/2]
	if _, err := hex.Decode(c.arena[start:], v[2:]); err != nil {
		return nil, payload.Wrap(payload.ProtocolError, "pgbridge", err)
	}
	return c.arena[start:len(c.arena):len(c.arena)], nil
}

var errMaxAttempts = errors.New("pgbridge: exceeded max attempts")
