// Command cartnode is a berth node hosting the cart kind: a program's own
// kinds run as a node take this one call. It has every setting, signal and
// exit code of `berth node` (package node); for example:
//
//	BERTH_DB=postgres://... cartnode -name cart-1 -listen 127.0.0.1:0
package main

import (
	"github.com/berthrt/berth/examples/cart"
	"github.com/berthrt/berth/node"
)

func main() { node.Main(cart.Kind()) }
