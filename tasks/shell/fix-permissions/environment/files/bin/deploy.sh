#!/bin/bash
echo deployed
