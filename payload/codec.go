package payload

import (
	"reflect"

	sjson "github.com/segmentio/encoding/json"
	"google.golang.org/protobuf/proto"
)

// Codec turns values of a declared message type into bytes and back.
//
// Codecs must be safe for concurrent use. The raw bytes a codec sees are for
// codec implementations and transport inspection only: handlers receive the
// decoded value, never the bytes.
type Codec interface {
	// ContentType returns the codec's content type. The registry normalizes
	// it once, at registration (see NormalizeContentType).
	ContentType() string
	// Encode appends the encoding of *v to dst and returns the extended
	// slice. v is a non-nil pointer to a value of the declared message type,
	// valid only for the duration of the call (berth reuses it). On error
	// the returned slice is ignored.
	Encode(dst []byte, v any) ([]byte, error)
	// Decode decodes data into v, a non-nil pointer to a zero value of the
	// declared type. data is lent for the duration of the call only: the
	// decoded value must not refer to it.
	Decode(data []byte, v any) error
}

// Selector reports whether a codec applies to a declared message type: the
// type parameter of the send call, never the dynamic type of a value.
type Selector func(declared reflect.Type) bool

// ForType returns a Selector matching exactly the declared type T.
func ForType[T any]() Selector {
	t := reflect.TypeFor[T]()
	return func(d reflect.Type) bool { return d == t }
}

// Implementing returns a Selector matching declared types that implement the
// interface I. It panics if I is not an interface type.
func Implementing[I any]() Selector {
	it := reflect.TypeFor[I]()
	if it.Kind() != reflect.Interface {
		panic("payload: Implementing needs an interface type, got " + it.String())
	}
	return func(d reflect.Type) bool { return d.Implements(it) }
}

// JSON is the default codec, content type "application/json". It encodes
// and decodes with github.com/segmentio/encoding/json, which follows the
// semantics of encoding/json (struct tags, omitempty, Marshaler and
// TextMarshaler, HTML escaping, sorted map keys) while appending into the
// caller's buffer and decoding about twice as fast; TestJSONMatchesEncodingJSON
// pins the equivalence for the shapes berth users send. Since Encode gets a
// pointer to the value, the bytes are those of json.Marshal(&v): a
// MarshalJSON method with a pointer receiver is honored.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return "application/json" }

func (jsonCodec) Encode(dst []byte, v any) ([]byte, error) {
	return sjson.Append(dst, v, sjson.EscapeHTML|sjson.SortMapKeys)
}

func (jsonCodec) Decode(data []byte, v any) error { return sjson.Unmarshal(data, v) }

// Protobuf is the protocol buffers codec, content type "application/protobuf",
// for declared types that implement proto.Message (pointer types such as
// *pb.Order). Register it with IsProtoMessage. It appends into the caller's
// buffer; decoding allocates the message.
var Protobuf Codec = protoCodec{}

// IsProtoMessage selects declared types that implement proto.Message.
var IsProtoMessage Selector = Implementing[proto.Message]()

type protoCodec struct{}

func (protoCodec) ContentType() string { return "application/protobuf" }

func (protoCodec) Encode(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message) // a declared value type implementing proto.Message
	if !ok {
		// v points to a declared pointer type, such as **pb.Order.
		if m = protoElem(v, false); m == nil {
			return dst, codecTypeError("payload.Protobuf.Encode", v)
		}
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

// protoElem returns the proto.Message that v, a pointer to a declared
// pointer type, points to; alloc makes a new message for a nil one, else a
// nil message stays a typed nil (which encodes as empty). It returns nil if v
// is not of that shape.
func protoElem(v any, alloc bool) proto.Message {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil
	}
	e := rv.Elem()
	if e.Kind() != reflect.Pointer {
		return nil
	}
	// A type assertion uses the runtime's itab cache; reflect's Implements
	// would scan method sets on every call.
	m, ok := e.Interface().(proto.Message)
	if !ok {
		return nil
	}
	if alloc && e.IsNil() {
		e.Set(reflect.New(e.Type().Elem()))
		m = e.Interface().(proto.Message)
	}
	return m
}

func (protoCodec) Decode(data []byte, v any) error {
	if m, ok := v.(proto.Message); ok {
		return proto.Unmarshal(data, m)
	}
	// v points to a declared pointer type, such as **pb.Order.
	if m := protoElem(v, true); m != nil {
		return proto.Unmarshal(data, m)
	}
	return codecTypeError("payload.Protobuf.Decode", v)
}

// Raw is a codec for []byte payloads, content type "application/octet-stream",
// meant for codec extensions and tests. Register it with ForType[[]byte]().
// Decoding copies the bytes into a new slice: the value handed on never
// refers to the message's storage.
var Raw Codec = rawCodec{}

type rawCodec struct{}

func (rawCodec) ContentType() string { return "application/octet-stream" }

func (rawCodec) Encode(dst []byte, v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return dst, codecTypeError("payload.Raw.Encode", v)
	}
	return append(dst, *b...), nil
}

func (rawCodec) Decode(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return codecTypeError("payload.Raw.Decode", v)
	}
	*p = append([]byte(nil), data...)
	return nil
}

func codecTypeError(op string, v any) error {
	name := "nil"
	if v != nil {
		name = reflect.TypeOf(v).String()
	}
	return NewError(TypeMismatch, op, "cannot handle "+name)
}
