module github.com/berthrt/berth

go 1.26

require (
	github.com/segmentio/encoding v0.5.4
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/segmentio/asm v1.1.3 // indirect
	golang.org/x/sys v0.0.0-20211110154304-99a53858aa08 // indirect
)
