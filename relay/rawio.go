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
	return &rawIO{conn: c, rc: rc}
}

func (c *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN: // nothing yet: the poller parks the goroutine until there is
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
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

func (c *rawIO) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN: // the socket's send buffer is full: wait until it drains
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// opError words an error as net.Conn's Read and Write do ("read tcp A->B: ..."), the
// RawConn's own wrapping ("raw-read") taken off.
func (c *rawIO) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.conn.LocalAddr(), Addr: c.conn.RemoteAddr(), Err: err}
}
