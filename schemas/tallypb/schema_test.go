package tallypb_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/tallypipeline/tally/schemas/tallypb"
)

// compile compiles schemas/proto/tally.proto without protoc.
func compile(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{ImportPaths: []string{"../proto"}}}
	files, err := c.Compile(context.Background(), "tally.proto")
	if err != nil {
		t.Fatalf("compile tally.proto: %v", err)
	}
	return files[0]
}

// TestGeneratedCodeMatchesTheProto fails when tally.proto changed and scripts/gen-proto was
// not run.
func TestGeneratedCodeMatchesTheProto(t *testing.T) {
	got := protodesc.ToFileDescriptorProto(tallypb.File_tally_proto)
	want := protodesc.ToFileDescriptorProto(compile(t))
	got.SourceCodeInfo, want.SourceCodeInfo = nil, nil
	if !proto.Equal(got, want) {
		t.Errorf("schemas/tallypb was generated from another tally.proto; run scripts/gen-proto\ngot  %v\nwant %v", got, want)
	}
}

// released is the schema of the last release (schemas/proto/released.binpb, protoc's
// --descriptor_set_out), which records already in logs were written with.
func released(t *testing.T) *descriptorpb.FileDescriptorProto {
	t.Helper()
	raw, err := os.ReadFile("../proto/released.binpb")
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		t.Fatalf("read released.binpb: %v", err)
	}
	return set.File[0]
}

func TestNoBreakingChangeSinceRelease(t *testing.T) {
	old, err := protodesc.NewFile(released(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := breakingChanges(old, compile(t)); len(d) > 0 {
		t.Errorf("tally.proto breaks the released schema:\n%s", strings.Join(d, "\n"))
	}
}

// TestBreakingChangesAreFound checks the checker on edits of the released schema.
func TestBreakingChangesAreFound(t *testing.T) {
	field := func(fd *descriptorpb.FileDescriptorProto, msg, name string) *descriptorpb.FieldDescriptorProto {
		for _, m := range fd.MessageType {
			for _, f := range m.Field {
				if m.GetName() == msg && f.GetName() == name {
					return f
				}
			}
		}
		panic("no field " + msg + "." + name)
	}
	tests := []struct {
		name string
		edit func(fd *descriptorpb.FileDescriptorProto)
		want string // "" when the edit is compatible
	}{
		{"a field added", func(fd *descriptorpb.FileDescriptorProto) {
			fd.MessageType[1].Field = append(fd.MessageType[1].Field, &descriptorpb.FieldDescriptorProto{
				Name: proto.String("region"), Number: proto.Int32(9), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("region")})
		}, ""},
		{"a field renumbered", func(fd *descriptorpb.FileDescriptorProto) { field(fd, "View", "ts_ms").Number = proto.Int32(9) }, "tally.v1.View field 4 (ts_ms) removed"},
		{"a field retyped", func(fd *descriptorpb.FileDescriptorProto) {
			field(fd, "View", "ts_ms").Type = descriptorpb.FieldDescriptorProto_TYPE_UINT64.Enum()
		}, "tally.v1.View field 4 (ts_ms) was int64, is uint64"},
		{"a field made repeated", func(fd *descriptorpb.FileDescriptorProto) {
			field(fd, "Click", "device").Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		}, "tally.v1.Click field 6 (device) was optional, is repeated"},
		{"a message removed", func(fd *descriptorpb.FileDescriptorProto) {
			fd.MessageType = fd.MessageType[1:]
		}, "message tally.v1.Record removed"},
		{"an enum value removed", func(fd *descriptorpb.FileDescriptorProto) {
			fd.EnumType[0].Value = fd.EnumType[0].Value[:2]
		}, "enum tally.v1.Verdict value 2 removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oldFD, newFD := released(t), released(t)
			tt.edit(newFD)
			old, err := protodesc.NewFile(oldFD, nil)
			if err != nil {
				t.Fatal(err)
			}
			cur, err := protodesc.NewFile(newFD, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(breakingChanges(old, cur), "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

// breakingChanges lists what cur changed in old that a reader of records written with old
// would misread: a message, field or enum value gone (unless its number is reserved), or a
// field whose name, type or cardinality changed.
func breakingChanges(old, cur protoreflect.FileDescriptor) []string {
	var out []string
	for i := range old.Messages().Len() {
		m := old.Messages().Get(i)
		m2 := cur.Messages().ByName(m.Name())
		if m2 == nil {
			out = append(out, fmt.Sprintf("message %s removed", m.FullName()))
			continue
		}
		for j := range m.Fields().Len() {
			out = append(out, fieldChange(m.Fields().Get(j), m2)...)
		}
	}
	for i := range old.Enums().Len() {
		e := old.Enums().Get(i)
		e2 := cur.Enums().ByName(e.Name())
		if e2 == nil {
			out = append(out, fmt.Sprintf("enum %s removed", e.FullName()))
			continue
		}
		for j := range e.Values().Len() {
			v := e.Values().Get(j)
			if e2.Values().ByNumber(v.Number()) == nil && !e2.ReservedRanges().Has(v.Number()) {
				out = append(out, fmt.Sprintf("enum %s value %d removed", e.FullName(), v.Number()))
			}
		}
	}
	return out
}

func fieldChange(f protoreflect.FieldDescriptor, m2 protoreflect.MessageDescriptor) []string {
	f2 := m2.Fields().ByNumber(f.Number())
	where := fmt.Sprintf("%s field %d (%s)", m2.FullName(), f.Number(), f.Name())
	switch {
	case f2 == nil && m2.ReservedRanges().Has(f.Number()):
		return nil
	case f2 == nil:
		return []string{where + " removed"}
	case f2.Name() != f.Name():
		return []string{fmt.Sprintf("%s renamed to %s", where, f2.Name())}
	case f2.Kind() != f.Kind():
		return []string{fmt.Sprintf("%s was %s, is %s", where, f.Kind(), f2.Kind())}
	case f2.Cardinality() != f.Cardinality():
		return []string{fmt.Sprintf("%s was %s, is %s", where, f.Cardinality(), f2.Cardinality())}
	case f.Message() != nil && f2.Message().FullName() != f.Message().FullName():
		return []string{fmt.Sprintf("%s was %s, is %s", where, f.Message().FullName(), f2.Message().FullName())}
	case f.Enum() != nil && f2.Enum().FullName() != f.Enum().FullName():
		return []string{fmt.Sprintf("%s was %s, is %s", where, f.Enum().FullName(), f2.Enum().FullName())}
	}
	return nil
}
