package tests

import (
	"io"
	"log/slog"

	"github.com/berthrt/berth/mailbox"
)

func limits(items int) mailbox.Limits { return mailbox.Limits{Items: items, Bytes: 64 << 20} }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
