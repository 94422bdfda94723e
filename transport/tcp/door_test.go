package tcp

import "testing"

// The door's rule, as a table: the victim is a slot of the address that
// holds the most slots (the newcomer counting for its own), silent before
// heard, oldest first.
func TestAFullDoorClosesTheOldestSilentConnectionOfTheAddressHoldingTheMost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots []slotInfo
		addr  string
		want  int
	}{
		{"the oldest", []slotInfo{{"x", 3, false}, {"x", 1, false}, {"x", 2, false}}, "x", 1},
		{"silent before heard, though younger",
			[]slotInfo{{"x", 1, true}, {"x", 2, false}, {"x", 3, true}}, "x", 1},
		{"the flooder's, not the lone member's older one",
			[]slotInfo{{"m", 1, false}, {"f", 2, false}, {"f", 3, false}}, "z", 1},
		{"the flooder's heard one before the lone member's silent one",
			[]slotInfo{{"m", 1, false}, {"f", 2, true}, {"f", 3, true}}, "z", 1},
		{"the newcomer's own address when it holds the most",
			[]slotInfo{{"f", 5, false}, {"g", 1, false}, {"f", 9, false}}, "f", 0},
		{"a tie between addresses: silent, then oldest, among them",
			[]slotInfo{{"a", 4, true}, {"b", 7, false}, {"a", 2, true}, {"b", 6, true}}, "c", 1},
	} {
		if got := victim(tc.slots, tc.addr); got != tc.want {
			t.Errorf("%s: victim %d (%+v), want %d (%+v)", tc.name, got, tc.slots[got], tc.want, tc.slots[tc.want])
		}
	}
}
