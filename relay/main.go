// Command relay is a MySQL-protocol relay that can hold every session at a statement boundary
// and move it, with its state, to another backend: a switchover with no client error.
//
//	relay -listen 127.0.0.1:3307 -backend 127.0.0.1:3306 -users FILE -control /run/relay.sock
//	relay ctl -control /run/relay.sock hold | release | move HOST:PORT [DRAIN_S] | status | reload | seq N
//	relay ... -state FILE   (the backend saved on every move, read at start)
//
// FILE holds one "user *HEX" line per account: mysql.user.authentication_string, the
// mysql_native_password hash (never a password). See docs/internals/relay.md.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if len(os.Args) > 1 && os.Args[1] == "ctl" {
		os.Exit(ctl(os.Args[2:]))
	}
	listen := flag.String("listen", "127.0.0.1:3307", "address clients connect to")
	backend := flag.String("backend", "", "backend HOST:PORT at start (changed with `move`)")
	users := flag.String("users", "", "file of \"user *HEX\" lines (mysql_native_password hashes)")
	control := flag.String("control", "", "unix socket of the control API")
	maxHold := flag.Float64("max-hold-s", 10, "a hold not released within this many seconds releases by itself")
	drain := flag.Float64("drain-s", 5, "after a move, sessions still in a transaction this long are ended")
	verbose := flag.Bool("v", false, "log every session's connection")
	statePath := flag.String("state", "", "file where every move saves the backend; read at start (it wins over -backend)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file until the relay stops (SIGTERM/SIGINT); off by default")
	procs := flag.Int("gomaxprocs", 0, "threads running Go code at once (0: Go's default, one per CPU)")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *backend == "" || *users == "" || *control == "" {
		fmt.Fprintln(os.Stderr, "relay: -backend, -users and -control are required")
		flag.Usage()
		os.Exit(2)
	}
	if *statePath != "" {
		saved, err := loadState(*statePath)
		if err != nil {
			log.Fatalf("relay: %v", err)
		}
		if saved != "" && saved != *backend {
			log.Printf("relay: state file %s: backend %s (not -backend %s)", *statePath, saved, *backend)
			*backend = saved
		}
	}
	r, err := newRelay(*backend, *users, seconds(*maxHold), seconds(*drain))
	if err != nil {
		log.Fatalf("relay: %v", err)
	}
	r.statePath = *statePath
	r.verbose = *verbose
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("relay: %v", err)
	}
	os.Remove(*control) // a socket left by an earlier relay: nothing listens on it
	cl, err := net.Listen("unix", *control)
	if err != nil {
		log.Fatalf("relay: control socket: %v", err)
	}
	os.Chmod(*control, 0o600)
	go func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			go r.control(c)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		log.Printf("relay: %v: stopping", s)
		cl.Close()
		ln.Close()
	}()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Fatalf("relay: -cpuprofile: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	log.Printf("relay: listening on %s, backend %s, control %s", ln.Addr(), *backend, *control)
	err = r.serve(ln)
	os.Remove(*control)
	if err != nil && !strings.Contains(err.Error(), "use of closed") {
		pprof.StopCPUProfile()
		log.Fatalf("relay: %v", err)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ctl sends one command to a running relay and prints its JSON answer; exit 1 when not ok.
func ctl(args []string) int {
	fs := flag.NewFlagSet("ctl", flag.ExitOnError)
	control := fs.String("control", "", "the relay's control socket")
	fs.Parse(args)
	if *control == "" || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: relay ctl -control SOCKET hold|release|move HOST:PORT [DRAIN_S]|status|reload")
		return 2
	}
	c, err := net.Dial("unix", *control)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay ctl:", err)
		return 1
	}
	defer c.Close()
	fmt.Fprintln(c, strings.Join(fs.Args(), " "))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay ctl:", err)
		return 1
	}
	fmt.Print(line)
	if strings.Contains(line, `"ok":false`) {
		return 1
	}
	return 0
}
