# contrib/gdb/xqp-state.gdb - print every xqp interface a running process
# progresses, with its endpoints and their QPs.
#
#   gdb -p PID -batch -x contrib/gdb/xqp-state.gdb
#
# It stops in xqp's iface_progress (the process must be calling progress:
# a hung UCX test or application spinning on a request), prints each
# interface the first time it is progressed (its members but the UCT
# operation table) and each of its endpoints, and detaches after 60
# progress calls. contrib/ucx-gtest.sh runs it on a hung gtest process.
set print pretty on
set print elements 16
set print static-members off
python
import gdb

class XqpState(gdb.Breakpoint):
    SKIP = ('handle_', 'rx_wrs_', 'rx_sges_')
    CALLS = 60

    def __init__(self):
        super().__init__('xqp::iface::iface_progress', internal=True)
        self.calls = 0
        self.seen = set()

    @staticmethod
    def members(value, skip=()):
        for f in value.type.strip_typedefs().fields():
            if f.name is None or f.name in skip or f.artificial:
                continue
            try:
                print('  %s = %s' % (f.name, value[f.name]))
            except gdb.error as e:
                print('  %s: %s' % (f.name, e))

    @staticmethod
    def elements(vector):
        impl = vector['_M_impl']
        first, last = impl['_M_start'], impl['_M_finish']
        return [(first + i).dereference() for i in range(int(last - first))]

    def dump(self, tl_iface):
        handle = tl_iface.cast(gdb.lookup_type('xqp::iface::Iface::Handle').pointer())
        iface = handle['owner'].dereference()
        print('==== xqp interface %s (uct_iface_h %s)' % (handle['owner'], tl_iface))
        self.members(iface, self.SKIP)
        for ep in self.elements(iface['eps_']):
            print('---- endpoint %s' % ep)
            self.members(ep.dereference(), ('handle_',))
            if int(ep['qp_']) != 0:
                print('  *qp_ = %s' % ep['qp_'].dereference())

    def stop(self):
        self.calls += 1
        try:
            tl_iface = gdb.parse_and_eval('tl_iface')
            if int(tl_iface) not in self.seen:
                self.seen.add(int(tl_iface))
                self.dump(tl_iface)
        except gdb.error as e:
            print('xqp-state: %s' % e)
            return True
        if self.calls >= self.CALLS:
            print('==== xqp-state: %d progress calls, %d interfaces' % (self.calls, len(self.seen)))
            return True
        return False

try:
    gdb.decode_line('xqp::iface::iface_progress')
except gdb.error:
    print('xqp-state: no xqp in this process')
else:
    XqpState()
    gdb.execute('continue')
end
