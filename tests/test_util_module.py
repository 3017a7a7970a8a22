"""``mx.util``: MXNet's NumPy-semantics switches, scopes and decorators exist and change nothing."""

import mxlite as mx


def test_util_scopes_decorators_and_queries_are_accepted():
    with mx.util.np_shape(True), mx.util.np_array(True):
        assert mx.util.is_np_shape() and mx.util.is_np_array()

    @mx.util.np_shape(True)
    def shape_of(x):
        return x.shape

    assert shape_of(mx.np.ones((2, 0))) == (2, 0)

    @mx.util.use_np
    class Net(mx.gluon.nn.Block):
        def forward(self, x):
            return x * 2

    assert mx.util.use_np_shape(shape_of) is shape_of and mx.util.use_np_array(Net) is Net
    assert Net()(mx.np.ones(3)).asnumpy().tolist() == [2.0, 2.0, 2.0]
    mx.util.set_np()
    mx.util.reset_np()
    assert mx.util.is_np_array()


def test_gluon_submodules_import_as_in_mxnet():
    from mxlite.gluon.block import HybridBlock
    from mxlite.gluon.parameter import DeferredInitializationError, Parameter
    from mxlite.gluon.trainer import Trainer

    assert HybridBlock is mx.gluon.HybridBlock and Parameter is mx.gluon.Parameter and Trainer is mx.gluon.Trainer
    assert DeferredInitializationError is mx.gluon.parameter.DeferredInitializationError
    assert mx.util.set_np_shape(True) is True
