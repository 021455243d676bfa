package main

// Socket reads and writes without the Go scheduler's syscall bookkeeping.
//
// A net.Conn's Read and Write enter the kernel through syscall.Syscall, which tells the
// scheduler a goroutine may block (entersyscall/exitsyscall). On a non-blocking socket neither
// call ever blocks, and that bookkeeping is not free: each entry wakes the runtime's monitor
// thread (sysmon) whenever it went to sleep because every P was idle, which on a relay is
// between any two statements; the monitor then polls every 20 us for a while, then sleeps
// again. Profiled under bench/relay.py's load this cost about one futex wake-up and one
// nanosleep per statement relayed. rawIO makes the same read(2)/write(2) calls with
// syscall.RawSyscall, inside the connection's RawConn: the runtime's poller still parks the
// goroutine when the socket is not ready (EAGAIN), and the connection's deadlines and Close
// still apply.

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

type rawIO struct {
	conn net.Conn
	rc   syscall.RawConn
	r, w rawOp // one per direction: a read and a write never share their state
}

// rawOp is one direction's call in progress, and the function RawConn runs for it: kept in the
// connection, made once, so that a call allocates nothing.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// newRawIO wraps a TCP connection; any other net.Conn (a test's pipe) is returned as it is.
func newRawIO(c net.Conn) io.ReadWriter {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	x := &rawIO{conn: c, rc: rc}
	x.r.fn = x.r.read
	x.w.fn = x.w.write
	return x
}

func (c *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	op := &c.r
	op.p, op.n, op.errno = p, 0, 0
	err := c.rc.Read(op.fn)
	n, errno := op.n, op.errno
	op.p = nil
	if err != nil {
		return 0, c.opError("read", err)
	}
	if errno != 0 {
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// read: one read(2); false (wait for the socket to be readable, then again) on EAGAIN.
func (op *rawOp) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&op.p[0])), uintptr(len(op.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN: // nothing yet: the poller parks the goroutine until there is
			return false
		case 0:
			op.n = int(r)
		default:
			op.errno = e
		}
		return true
	}
}

func (c *rawIO) Write(p []byte) (int, error) {
	op := &c.w
	op.p, op.n, op.errno = p, 0, 0
	err := c.rc.Write(op.fn)
	n, errno := op.n, op.errno
	op.p = nil
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// write: write(2) until all of op.p is written; false (wait until the socket's send buffer
// drains, then again) on EAGAIN.
func (op *rawOp) write(fd uintptr) bool {
	for op.n < len(op.p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&op.p[op.n])), uintptr(len(op.p)-op.n))
		switch e {
		case 0:
			op.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			op.errno = e
			return true
		}
	}
	return true
}

// opError words an error as net.Conn's Read and Write do ("read tcp A->B: ..."), the
// RawConn's own wrapping ("raw-read") taken off.
func (c *rawIO) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.conn.LocalAddr(), Addr: c.conn.RemoteAddr(), Err: err}
}
